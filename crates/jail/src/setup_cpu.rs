//! A sandbox's own processes stay on one CPU; its commands do not.
//!
//! Setting up hands the work from process to process: the supervisor
//! clones the idmapping helper and the init and forks the janitor, the
//! init starts the workload, each waiting on the next. The kernel places
//! a new process on the idlest CPU, so each of these hand-overs wakes the
//! other CPU, and an idle CPU is slow to wake (a virtual CPU halted in its
//! hypervisor, a physical one in a deep sleep state): on a 2-vCPU VM this
//! cost about 0.3 ms of a 5 ms run, and throughput with both CPUs busy fell
//! too (`benches/startup/compare.sh`, BENCHMARKS.md). While the supervisor
//! and the processes it starts are held on the CPU it runs on, each
//! hand-over stays there. A session's init holds itself the same way
//! (`session_init::serve`), so the leader and workload of each exec start
//! on its CPU.
//!
//! The command never runs held: the workload gets the caller's CPUs back
//! just before its `execve`. The threads the supervisor starts for the run
//! are started with every CPU too: the egress proxy's by the supervisor,
//! and a hook's that starts threads of its own inside [`with_every_cpu`]
//! (the hooks themselves run held: giving the supervisor its CPUs back
//! around all of them cost the run with an audit record 0.2 ms). The
//! supervisor
//! itself, the init (which only waits and reaps) and the janitor (which
//! only waits) stay on the one CPU until the run ends, so that the
//! hand-overs of the teardown (the command's exit wakes the init, the
//! init's the supervisor) stay there as well: giving the supervisor its
//! CPUs back once the command started measured no gain at all. None of
//! this is a protection: when the kernel refuses, nothing is held.

use std::cell::Cell;

use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};

thread_local! {
    /// The calling thread's hold, if it has one: its CPUs before, and the
    /// one it is held on.
    static HOLD: Cell<Option<(CpuSet, CpuSet)>> = const { Cell::new(None) };
}

/// The calling thread's CPUs before it was held on one.
pub(crate) struct SetupCpu {
    original: CpuSet,
}

impl SetupCpu {
    /// Hold the calling thread, and so every process it starts, on the
    /// CPU it runs on. `None` when it may run on one CPU only anyway, or
    /// the kernel refuses (a machine with more CPUs than a `CpuSet`
    /// holds).
    pub(crate) fn hold() -> Option<SetupCpu> {
        let original = sched_getaffinity(None).ok()?;
        if original.count() < 2 {
            return None;
        }
        let here = sched_getcpu();
        // (Beyond `MAX_CPU` the kernel refused `sched_getaffinity` above;
        // checked anyway, as `is_set` would panic there.)
        if here >= CpuSet::MAX_CPU || !original.is_set(here) {
            return None;
        }
        let mut held = CpuSet::new();
        held.set(here);
        sched_setaffinity(None, &held).ok()?;
        HOLD.with(|h| h.set(Some((original, held))));
        Some(SetupCpu { original })
    }

    /// The CPUs to give back to a process started while held.
    pub(crate) fn original(&self) -> &CpuSet {
        &self.original
    }
}

impl Drop for SetupCpu {
    /// The run is over (or failed half-way): the calling thread gets its
    /// CPUs back.
    fn drop(&mut self) {
        HOLD.with(|h| h.set(None));
        let _ = give_back(&self.original);
    }
}

/// Run `f` with the calling thread's CPUs given back if a sandbox's
/// supervisor holds it on one, then hold it again: threads `f` starts may
/// run on every CPU. A [`crate::Hooks`] method that starts threads starts
/// them in here.
pub fn with_every_cpu<T>(f: impl FnOnce() -> T) -> T {
    let Some((original, held)) = HOLD.with(Cell::get) else {
        return f();
    };
    let _ = give_back(&original);
    let result = f();
    let _ = sched_setaffinity(None, &held);
    result
}

/// Let the calling thread run on `cpus` again (a process started while
/// the setup was held calls it before its command runs).
pub(crate) fn give_back(cpus: &CpuSet) -> std::io::Result<()> {
    sched_setaffinity(None, cpus).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run in a child process, so that the test harness's own threads keep
    /// their CPUs whatever happens.
    fn in_child(check: fn() -> bool) -> bool {
        match crate::sys::fork() {
            Ok(None) => crate::sys::exit_now(if check() { 0 } else { 1 }),
            Ok(Some(pid)) => matches!(crate::sys::wait4(pid, 0), Ok((_, 0, _))),
            Err(e) => panic!("fork: {e}"),
        }
    }

    #[test]
    fn a_held_run_is_on_one_cpu_starts_threads_on_all_and_gets_them_back() {
        let before = match sched_getaffinity(None) {
            Ok(set) => set,
            Err(e) => panic!("sched_getaffinity: {e}"),
        };
        if before.count() < 2 {
            assert!(
                std::env::var_os("CORDON_TESTS_REQUIRE_ALL").is_none(),
                "SKIPPED: this test needs two CPUs (this process may use {})",
                before.count()
            );
            eprintln!("SKIPPED: this test needs two CPUs");
            return;
        }
        assert!(in_child(|| {
            let Ok(before) = sched_getaffinity(None) else {
                return false;
            };
            let Some(held) = SetupCpu::hold() else {
                return false;
            };
            let during = sched_getaffinity(None).ok();
            let one_cpu = during.as_ref().is_some_and(|s| s.count() == 1);
            let own_cpu = during.as_ref().is_some_and(|s| s.is_set(sched_getcpu()));
            let unheld = with_every_cpu(|| sched_getaffinity(None).ok());
            let held_again = sched_getaffinity(None).ok() == during;
            drop(held);
            let after = sched_getaffinity(None).ok();
            one_cpu
                && own_cpu
                && unheld.as_ref() == Some(&before)
                && held_again
                && after.as_ref() == Some(&before)
        }));
    }

    #[test]
    fn a_setup_dropped_half_way_gets_its_cpus_back() {
        assert!(in_child(|| {
            let Ok(before) = sched_getaffinity(None) else {
                return false;
            };
            drop(SetupCpu::hold());
            sched_getaffinity(None).ok().as_ref() == Some(&before)
        }));
    }
}
