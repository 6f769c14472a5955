//! A call that a policy holds for a person waits until the answer, and
//! the request alone says nothing meanwhile. [`look_while`] runs such a
//! call and, once it has waited a moment, looks (every second) for what
//! it waits on, so that a client (`cordon sandbox`, `cordon mcp --server`)
//! can name the pending approvals to the person who started it.

use std::future::Future;
use std::time::Duration;

/// How long a call runs before the first look, and how often after that.
pub const FIRST_LOOK: Duration = Duration::from_millis(700);
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A look for what a call waits on (the pending approvals it may be
/// held on, and naming them).
pub trait Look {
    fn look(&mut self) -> impl Future<Output = ()> + Send;
}

/// Run `call` to its end; while it runs past [`FIRST_LOOK`], look every
/// [`LOOK_EVERY`] (during a look the call is not polled: it goes on once
/// the look returns).
pub async fn look_while<T>(call: impl Future<Output = T>, mut looker: impl Look) -> T {
    tokio::pin!(call);
    let mut looks = tokio::time::interval_at(tokio::time::Instant::now() + FIRST_LOOK, LOOK_EVERY);
    loop {
        tokio::select! {
            out = &mut call => return out,
            _ = looks.tick() => looker.look().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count<'a>(&'a mut u32);

    impl Look for Count<'_> {
        async fn look(&mut self) {
            *self.0 += 1;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn looks_start_after_a_moment_and_repeat_until_the_call_ends() {
        let mut looked = 0;
        let slow = async {
            tokio::time::sleep(Duration::from_millis(2_800)).await;
            7
        };
        assert_eq!(look_while(slow, Count(&mut looked)).await, 7);
        // At 0.7, 1.7 and 2.7 s.
        assert_eq!(looked, 3);
        looked = 0;
        assert_eq!(look_while(async { 1 }, Count(&mut looked)).await, 1);
        assert_eq!(looked, 0);
    }
}
