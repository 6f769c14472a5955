//! Splitting one output stream of the driver into the cell's own bytes and
//! the driver's frames (`MARK LEN "\n" PAYLOAD`, see driver.py).
//!
//! Hand-written: the stream arrives in arbitrary chunks, a mark may be cut
//! across two of them, and nothing may be buffered without bound, which no
//! framing crate does for an in-band mark of our choosing.

/// Largest frame payload accepted (the driver cuts values at 1 MiB).
const MAX_FRAME: usize = 8 << 20;

/// A piece of a stream, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Bytes the cell wrote.
    Output(Vec<u8>),
    /// One frame's payload.
    Frame(Vec<u8>),
}

#[derive(Debug)]
enum State {
    Text,
    Length(Vec<u8>),
    Payload(usize),
}

/// Incremental splitter for one stream.
#[derive(Debug)]
pub(crate) struct Splitter {
    mark: Vec<u8>,
    pending: Vec<u8>,
    state: State,
}

/// The mark that opens a frame for `boundary`.
pub(crate) fn mark(boundary: &str) -> Vec<u8> {
    let mut m = b"\x1e@cordon-".to_vec();
    m.extend_from_slice(boundary.as_bytes());
    m.push(b'@');
    m
}

impl Splitter {
    pub(crate) fn new(mark: Vec<u8>) -> Splitter {
        Splitter {
            mark,
            pending: Vec::new(),
            state: State::Text,
        }
    }

    /// Feed a chunk; returns what it completes. Err: the driver broke the
    /// protocol (a bad length), which only a corrupted interpreter does.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Piece>, String> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            match &mut self.state {
                State::Text => match find_mark(&self.pending, &self.mark) {
                    Some(at) => {
                        let rest = self.pending.split_off(at + self.mark.len());
                        self.pending.truncate(at);
                        if !self.pending.is_empty() {
                            out.push(Piece::Output(std::mem::take(&mut self.pending)));
                        }
                        self.pending = rest;
                        self.state = State::Length(Vec::new());
                    }
                    None => {
                        let keep = partial_mark_suffix(&self.pending, &self.mark);
                        let rest = self.pending.split_off(self.pending.len() - keep);
                        if !self.pending.is_empty() {
                            out.push(Piece::Output(std::mem::take(&mut self.pending)));
                        }
                        self.pending = rest;
                        return Ok(out);
                    }
                },
                State::Length(digits) => {
                    let Some(nl) = self.pending.iter().position(|&b| b == b'\n') else {
                        digits.append(&mut self.pending);
                        if digits.len() > 20 {
                            return Err("a frame length longer than 20 digits".into());
                        }
                        return Ok(out);
                    };
                    digits.extend(self.pending.drain(..=nl));
                    digits.pop();
                    let len = std::str::from_utf8(digits)
                        .ok()
                        .and_then(|s| s.parse::<usize>().ok())
                        .ok_or_else(|| {
                            format!(
                                "a frame length that is not a number: {:?}",
                                String::from_utf8_lossy(digits)
                            )
                        })?;
                    if len > MAX_FRAME {
                        return Err(format!("a frame of {len} bytes (at most {MAX_FRAME})"));
                    }
                    self.state = State::Payload(len);
                }
                State::Payload(len) => {
                    if self.pending.len() < *len {
                        return Ok(out);
                    }
                    let rest = self.pending.split_off(*len);
                    out.push(Piece::Frame(std::mem::replace(&mut self.pending, rest)));
                    self.state = State::Text;
                }
            }
        }
    }

    /// Bytes held back because they might start a mark (at the end of the
    /// stream they are output after all).
    pub(crate) fn take_rest(&mut self) -> Vec<u8> {
        match self.state {
            State::Text => std::mem::take(&mut self.pending),
            _ => Vec::new(),
        }
    }
}

/// Where `mark` starts in `hay` (its first byte, 0x1e, is rare in output,
/// so candidates are few).
fn find_mark(hay: &[u8], mark: &[u8]) -> Option<usize> {
    let first = *mark.first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&b| b == first) {
        let at = from + i;
        if hay[at..].starts_with(mark) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Length of the longest suffix of `hay` that is a proper prefix of `mark`.
fn partial_mark_suffix(hay: &[u8], mark: &[u8]) -> usize {
    let longest = mark.len().saturating_sub(1).min(hay.len());
    (1..=longest)
        .rev()
        .find(|&n| mark.starts_with(&hay[hay.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn all(s: &mut Splitter, chunks: &[&[u8]]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut text = Vec::new();
        let mut frames = Vec::new();
        for c in chunks {
            for p in s.push(c).unwrap() {
                match p {
                    Piece::Output(b) => text.extend(b),
                    Piece::Frame(f) => frames.push(f),
                }
            }
        }
        text.extend(s.take_rest());
        (text, frames)
    }

    #[test]
    fn output_and_frames_split_at_any_chunk_boundary() {
        let m = mark("0123456789abcdef0123456789abcdef");
        let mut stream = b"hello \x1e@cordon-0123 not a mark\n".to_vec();
        stream.extend(&m);
        stream.extend(b"7\n{\"a\":1}after");
        stream.extend(&m);
        stream.extend(b"0\n");
        for cut in 1..stream.len() {
            let mut s = Splitter::new(m.clone());
            let (a, b) = stream.split_at(cut);
            let (text, frames) = all(&mut s, &[a, b]);
            assert_eq!(
                text, b"hello \x1e@cordon-0123 not a mark\nafter",
                "cut at {cut}"
            );
            assert_eq!(
                frames,
                vec![b"{\"a\":1}".to_vec(), Vec::new()],
                "cut at {cut}"
            );
        }
        // byte by byte
        let mut s = Splitter::new(m.clone());
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        let (_, frames) = all(&mut s, &chunks);
        assert_eq!(frames.len(), 2);
    }

    #[test]
    fn a_mark_with_another_boundary_is_plain_output() {
        let m = mark("0123456789abcdef0123456789abcdef");
        let forged = [mark("ffffffffffffffffffffffffffffffff"), b"2\n{}".to_vec()].concat();
        let mut s = Splitter::new(m);
        let (text, frames) = all(&mut s, &[&forged]);
        assert_eq!(text, forged);
        assert!(frames.is_empty());
    }

    #[test]
    fn bad_lengths_are_protocol_errors() {
        let m = mark("0123456789abcdef0123456789abcdef");
        let mut s = Splitter::new(m.clone());
        assert!(s.push(&[m.as_slice(), b"x\n"].concat()).is_err());
        let mut s = Splitter::new(m.clone());
        assert!(s.push(&[m.as_slice(), b"999999999999\n"].concat()).is_err());
        let mut s = Splitter::new(m.clone());
        assert!(s.push(&[m.as_slice(), &[b'1'; 30]].concat()).is_err());
    }
}
