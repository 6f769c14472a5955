//! A small classic-BPF assembler for seccomp: loads of `seccomp_data`
//! words, forward conditional jumps to labels, returns. Jumps name labels;
//! `finish` places them and turns them into the 8-bit relative offsets the
//! kernel expects, refusing any that do not fit.

use libc::sock_filter;

/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
/// `BPF_RET | BPF_K`.
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// `BPF_JMP | BPF_JA`.
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;

/// Offsets into `struct seccomp_data { int nr; u32 arch; u64 ip; u64 args[6]; }`.
pub const NR: u32 = 0;
pub const ARCH: u32 = 4;

/// The low 32 bits of argument `i` (what the kernel reads for an `int` or
/// `unsigned int` parameter).
pub const fn arg_low(i: u32) -> u32 {
    let base = 16 + 8 * i;
    if cfg!(target_endian = "little") {
        base
    } else {
        base + 4
    }
}

/// A comparison of the accumulator with a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `A == k`
    Eq,
    /// `A > k` (unsigned)
    Gt,
    /// `A >= k` (unsigned)
    Ge,
    /// `A & k != 0`
    Set,
}

impl Cmp {
    fn code(self) -> u16 {
        let op = match self {
            Cmp::Eq => libc::BPF_JEQ,
            Cmp::Gt => libc::BPF_JGT,
            Cmp::Ge => libc::BPF_JGE,
            Cmp::Set => libc::BPF_JSET,
        };
        (libc::BPF_JMP | op | libc::BPF_K) as u16
    }
}

/// A place in the program, bound once with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

#[derive(Debug, Clone, Copy)]
enum Op {
    Load(u32),
    Ret(u32),
    /// If `cmp` holds (`.3` true) or fails (false), go to the label;
    /// otherwise fall through.
    Jump(Cmp, u32, Label, bool),
    /// If `cmp` holds go to the first label, otherwise to the second.
    Branch(Cmp, u32, Label, Label),
    Goto(Label),
    Bind(Label),
}

/// A program under construction.
#[derive(Debug, Default)]
pub struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

impl Asm {
    pub fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    /// The next instruction is `label`'s target.
    pub fn bind(&mut self, label: Label) {
        self.ops.push(Op::Bind(label));
    }

    /// `A = seccomp_data[offset..offset + 4]`.
    pub fn load(&mut self, offset: u32) {
        self.ops.push(Op::Load(offset));
    }

    pub fn ret(&mut self, action: u32) {
        self.ops.push(Op::Ret(action));
    }

    pub fn jump_if(&mut self, cmp: Cmp, k: u32, to: Label) {
        self.ops.push(Op::Jump(cmp, k, to, true));
    }

    pub fn jump_unless(&mut self, cmp: Cmp, k: u32, to: Label) {
        self.ops.push(Op::Jump(cmp, k, to, false));
    }

    pub fn branch(&mut self, cmp: Cmp, k: u32, then: Label, otherwise: Label) {
        self.ops.push(Op::Branch(cmp, k, then, otherwise));
    }

    pub fn goto(&mut self, to: Label) {
        self.ops.push(Op::Goto(to));
    }

    /// Resolve the labels and emit the instructions.
    pub fn finish(self) -> Result<Vec<sock_filter>, String> {
        let mut at = vec![None; self.labels];
        let mut pc = 0usize;
        for op in &self.ops {
            match op {
                Op::Bind(Label(l)) => {
                    if at[*l].replace(pc).is_some() {
                        return Err(format!("label {l} bound twice"));
                    }
                }
                _ => pc += 1,
            }
        }
        if pc > libc::BPF_MAXINSNS as usize {
            return Err(format!("{pc} instructions, over the kernel's limit"));
        }
        let offset = |from: usize, Label(l): Label| -> Result<u32, String> {
            let target = at[l].ok_or_else(|| format!("label {l} never bound"))?;
            target
                .checked_sub(from + 1)
                .ok_or_else(|| format!("label {l} is behind instruction {from}"))
                .map(|d| d as u32)
        };
        let mut out = Vec::with_capacity(pc);
        for op in &self.ops {
            let pc = out.len();
            let insn = match *op {
                Op::Bind(_) => continue,
                Op::Load(offset) => stmt(LD_W_ABS, offset),
                Op::Ret(action) => stmt(RET_K, action),
                Op::Goto(to) => stmt(JA, offset(pc, to)?),
                Op::Jump(cmp, k, to, when) => {
                    let off = short(pc, offset(pc, to)?)?;
                    let (jt, jf) = if when { (off, 0) } else { (0, off) };
                    jump(cmp, k, jt, jf)
                }
                Op::Branch(cmp, k, then, otherwise) => jump(
                    cmp,
                    k,
                    short(pc, offset(pc, then)?)?,
                    short(pc, offset(pc, otherwise)?)?,
                ),
            };
            out.push(insn);
        }
        Ok(out)
    }
}

/// A conditional jump's offset, which must fit in 8 bits.
fn short(pc: usize, offset: u32) -> Result<u8, String> {
    u8::try_from(offset).map_err(|_| format!("jump from {pc} too far for 8 bits"))
}

fn jump(cmp: Cmp, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: cmp.code(),
        jt,
        jf,
        k,
    }
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}
