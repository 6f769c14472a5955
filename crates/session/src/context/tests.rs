//! The driver and the splitter together, with the host's python3 standing
//! in for the sandbox's (the same bytes travel; the session plumbing is
//! tested through the server by the `cordon serve` tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use super::frame::{mark, Piece, Splitter};
use super::*;

struct HostDriver {
    child: Child,
    stdin: ChildStdin,
    chunks: mpsc::Receiver<(StreamName, Vec<u8>)>,
    out: Splitter,
    err: Splitter,
}

#[derive(Debug, Default)]
struct Got {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    frame: Option<serde_json::Value>,
}

impl HostDriver {
    fn start() -> Option<HostDriver> {
        let boundary = random_boundary().unwrap();
        let mut child = match Command::new("python3")
            .args(["-u", "-c", PYTHON_BOOT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_none(),
                    "python3 missing: {e}"
                );
                eprintln!("SKIPPED: no python3 on the host: {e}");
                return None;
            }
        };
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&boot_input(&boundary)).unwrap();
        let (tx, chunks) = mpsc::channel();
        for (name, mut pipe) in [
            (
                StreamName::Stdout,
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            ),
            (StreamName::Stderr, Box::new(child.stderr.take().unwrap())),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 || tx.send((name, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            });
        }
        let m = mark(&boundary);
        let mut d = HostDriver {
            child,
            stdin,
            chunks,
            out: Splitter::new(m.clone()),
            err: Splitter::new(m),
        };
        let ready = d.exchange();
        assert_eq!(ready.frame.unwrap()["ready"], true);
        Some(d)
    }

    /// Read until both frames of one exchange arrived (or both pipes closed).
    fn exchange(&mut self) -> Got {
        let mut got = Got::default();
        let mut stderr_done = false;
        while got.frame.is_none() || !stderr_done {
            let Ok((stream, data)) = self.chunks.recv_timeout(Duration::from_secs(20)) else {
                return got;
            };
            let splitter = match stream {
                StreamName::Stdout => &mut self.out,
                StreamName::Stderr => &mut self.err,
            };
            for piece in splitter.push(&data).unwrap() {
                match (piece, stream) {
                    (Piece::Output(b), StreamName::Stdout) => got.stdout.extend(b),
                    (Piece::Output(b), StreamName::Stderr) => got.stderr.extend(b),
                    (Piece::Frame(f), StreamName::Stdout) => {
                        got.frame = Some(serde_json::from_slice(&f).unwrap())
                    }
                    (Piece::Frame(_), StreamName::Stderr) => stderr_done = true,
                }
            }
        }
        got
    }

    fn run(&mut self, code: &str) -> Got {
        self.stdin.write_all(&cell_request(code).unwrap()).unwrap();
        self.exchange()
    }
}

impl Drop for HostDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn state_survives_and_the_last_expression_is_the_value() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let a = d.run("x = 41");
    assert_eq!(a.frame.unwrap()["value"], serde_json::Value::Null);
    let b = d.run("x + 1");
    assert_eq!(b.frame.unwrap()["value"], "42");
    let c = d.run("def f(n):\n    return n * 2\nf(x)");
    assert_eq!(c.frame.unwrap()["value"], "82");
    let none = d.run("None");
    assert_eq!(none.frame.unwrap()["value"], serde_json::Value::Null);
    let s = d.run("'a\\nb'");
    assert_eq!(s.frame.unwrap()["value"], "'a\\nb'");
}

#[test]
fn output_through_print_fd_1_and_subprocesses_is_the_cells() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run(
        "import os, sys, subprocess\nprint('one')\nos.write(1, b'two\\n')\n\
         print('err', file=sys.stderr)\nsubprocess.run(['echo', 'three'])\n7",
    );
    assert_eq!(String::from_utf8_lossy(&g.stdout), "one\ntwo\nthree\n");
    assert_eq!(String::from_utf8_lossy(&g.stderr), "err\n");
    assert_eq!(g.frame.unwrap()["value"], "7");
    // A cell that closes fd 1 does not cut the result channel.
    let g = d.run("import os\nos.close(1)\n5");
    assert_eq!(g.frame.unwrap()["value"], "5");
}

#[test]
fn an_exception_gives_its_name_message_and_traceback() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run("def g():\n    return 1 / 0\ng()");
    let f = g.frame.unwrap();
    assert_eq!(f["error"]["name"], "ZeroDivisionError");
    assert_eq!(f["error"]["message"], "division by zero");
    let tb = f["error"]["traceback"].as_str().unwrap();
    assert!(tb.starts_with("Traceback"), "{tb}");
    assert!(tb.contains("return 1 / 0"), "the cell's source line: {tb}");
    assert!(
        !tb.contains("<string>") && !tb.contains("<cordon-driver>"),
        "no driver frames: {tb}"
    );
    let s = d.run("def (");
    assert_eq!(s.frame.unwrap()["error"]["name"], "SyntaxError");
    let e = d.run("import sys\nsys.exit(3)");
    assert_eq!(e.frame.unwrap()["error"]["name"], "SystemExit");
    assert_eq!(
        d.run("1 + 1").frame.unwrap()["value"],
        "2",
        "alive after SystemExit"
    );
}

#[test]
fn a_cell_cannot_read_the_next_cell_or_forge_a_result() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run("import sys, os\nr = (sys.stdin.read(), os.read(0, 100))\nr");
    assert_eq!(g.frame.unwrap()["value"], "('', b'')");
    // Output that looks like a frame (another boundary) is output.
    let forged = "print('\\x1e@cordon-' + '0' * 32 + '@9\\n{\"value\": \"6\"}')\n1";
    let g = d.run(forged);
    assert_eq!(g.frame.unwrap()["value"], "1");
    assert!(String::from_utf8_lossy(&g.stdout).contains("{\"value\": \"6\"}"));
}

#[test]
fn a_forked_child_does_not_answer_for_the_cell() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run("import os\npid = os.fork()\npid > 0");
    assert_eq!(g.frame.unwrap()["value"], "True");
    assert_eq!(d.run("2 * 3").frame.unwrap()["value"], "6");
}

#[test]
fn top_level_await_runs() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run("import asyncio\nawait asyncio.sleep(0)\nawait asyncio.sleep(0, result=9)");
    assert_eq!(g.frame.unwrap()["value"], "9");
}

#[test]
fn os_exit_ends_the_driver_without_a_frame() {
    let Some(mut d) = HostDriver::start() else {
        return;
    };
    let g = d.run("import os\nprint('bye')\nos._exit(1)");
    assert!(g.frame.is_none());
    assert_eq!(d.child.wait().unwrap().code(), Some(1));
}

#[test]
fn languages_parse_with_a_clear_error() {
    assert_eq!("python".parse::<Language>().unwrap(), Language::Python);
    let e = "ruby".parse::<Language>().unwrap_err().to_string();
    assert!(e.contains("ruby") && e.contains("supported: python"), "{e}");
}
