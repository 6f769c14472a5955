//! Asking the person at cordon's terminal about one action a policy left
//! to a human (`cordon run` on a terminal).
//!
//! The question goes to `/dev/tty`, cordon's controlling terminal, never to
//! standard input (which belongs to the command). The sandboxed command
//! cannot answer it: it runs in a session of its own without a controlling
//! terminal (it cannot open `/dev/tty`), and seccomp refuses the ioctl that
//! pushes bytes into a terminal's input (TIOCSTI). Input typed before the
//! question appeared is discarded, so nothing queued earlier answers it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// What the person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Allow this one action.
    Once,
    /// Allow it, and the same action again, until the run ends.
    Run,
    /// Refuse it.
    Deny,
    /// No answer in time.
    TimedOut,
}

/// The question: what is asked for, the rule that asked, and why.
#[derive(Debug)]
pub struct Question<'a> {
    pub subject: &'a str,
    pub rule: &'a str,
    pub reason: &'a str,
}

/// cordon's controlling terminal, if it has one.
pub fn terminal() -> Option<File> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    rustix::termios::isatty(&tty).then_some(tty)
}

/// Ask on `tty` and wait at most `timeout` for the answer.
pub fn ask(tty: &mut File, q: &Question<'_>, timeout: Duration) -> Answer {
    // Type-ahead (or anything queued before the question) is not an answer.
    let _ = rustix::termios::tcflush(tty.as_fd(), rustix::termios::QueueSelector::IFlush);
    let text = format!(
        "\ncordon: policy asks: {}\n  rule:   {}\n  reason: {}\nAllow it? [o]nce / for this [r]un / [d]eny (denied in {}s without an answer): ",
        q.subject,
        q.rule,
        q.reason,
        timeout.as_secs()
    );
    if tty.write_all(text.as_bytes()).is_err() {
        return Answer::TimedOut;
    }
    let answer = match read_line(tty, timeout) {
        Some(line) => parse(&line),
        None => Answer::TimedOut,
    };
    let said = match answer {
        Answer::Once => "allowed once",
        Answer::Run => "allowed for this run",
        Answer::Deny => "denied",
        Answer::TimedOut => "no answer: denied",
    };
    let _ = writeln!(tty, "\ncordon: {said}");
    answer
}

fn parse(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Answer::Once,
        "r" | "run" => Answer::Run,
        _ => Answer::Deny,
    }
}

/// One line from the terminal, or `None` when `timeout` passes first (or
/// the terminal is gone).
fn read_line(tty: &mut File, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let wait = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(tty, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
        let n = match tty.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n' || b == b'\r') {
            line.truncate(end);
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_strictly() {
        assert_eq!(parse("o"), Answer::Once);
        assert_eq!(parse(" Once\n"), Answer::Once);
        assert_eq!(parse("r"), Answer::Run);
        assert_eq!(parse("d"), Answer::Deny);
        assert_eq!(parse(""), Answer::Deny);
        assert_eq!(parse("sure, why not"), Answer::Deny);
    }
}
