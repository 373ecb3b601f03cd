//! No process outlives its job's agent (Linux).
//!
//! A job's command does not run as the agent's child but under a guard, `slaq job-guard`, a
//! small process of its own that the agent starts in the job's process group:
//!
//! - The guard is a *child subreaper* (`PR_SET_CHILD_SUBREAPER`): whatever the job starts and
//!   leaves behind (a launcher's workers, `sh -c 'sleep 1000 &'`, a process that called
//!   `setsid`) is re-parented to the guard, not to init, so the guard can always find every
//!   process of the job by walking its descendants.
//! - It gets `SIGTERM` when the agent dies, even by `SIGKILL` (`PR_SET_PDEATHSIG`), when the
//!   agent stops the job, or from an operator. Then every descendant gets `SIGTERM`, and
//!   `SIGKILL` after the grace (a second at most when the agent is gone: the world the job ran
//!   in has been given to others), or at once on a second `SIGTERM` (the agent cuts the grace
//!   short: the worker was taken for another tenant's job, on that tenant's terms).
//! - The job's command starts with no signal blocked, as it would outside slaq (the guard
//!   blocks the stop signals for itself, and a child inherits the mask).
//! - When the job's own process ends, what it left running is stopped the same way, and the
//!   guard ends as the job did (its exit code, or the same signal).
//!
//! If the guard itself is killed with the agent (`SIGKILL` to both), what the job started is
//! re-parented to init. An agent that starts again finds those by their environment
//! (`SLAQ_WORKER`, `SLAQ_PREFIX` and `SLAQ_NATS` as it gives them to every job) and stops them:
//! [`stop_leftovers`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The name of the hidden subcommand that runs [`run`].
pub const SUBCOMMAND: &str = "job-guard";

/// The pids of every descendant of `root` (children first), from `/proc/*/stat`.
fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        // A zombie is gone already (its parent reaps it); it has no children left.
        if let Some((ppid, _)) = stat_of(pid).filter(|(_, state)| *state != 'Z' && *state != 'X') {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = queue.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(c) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

/// A process's parent and state, from `/proc/<pid>/stat` (the fields after the command's
/// closing paren: the command may hold spaces and parens).
fn stat_of(pid: i32) -> Option<(i32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((fields.next()?.parse().ok()?, state))
}

fn parent_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|(ppid, _)| ppid)
}

fn signal_all(pids: &[i32], signal: libc::c_int) {
    for &pid in pids {
        // SAFETY: kill(2) with plain integers.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Reaps every exited child without waiting; returns the status of `main` if it was reaped.
fn reap(main: i32) -> Option<libc::c_int> {
    let mut main_status = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) with a valid pointer to an int.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return main_status;
        }
        if pid == main {
            main_status = Some(status);
        }
    }
}

/// Stops every descendant: `SIGTERM`, then `SIGKILL` to what is left after `grace` (or at
/// once when a stop signal in `set` comes meanwhile: the agent ends the grace early), until
/// none is left. Returns the main process's status if it was reaped meanwhile.
fn stop_all(
    me: i32,
    main: i32,
    grace: Duration,
    mut main_status: Option<libc::c_int>,
    set: &libc::sigset_t,
) -> Option<libc::c_int> {
    let mut deadline = Instant::now() + grace;
    let mut termed: HashSet<i32> = HashSet::new();
    loop {
        main_status = main_status.or(reap(main));
        let left = descendants(me);
        if left.is_empty() {
            return main_status;
        }
        if Instant::now() >= deadline {
            signal_all(&left, libc::SIGKILL);
        } else {
            let new: Vec<i32> = left.iter().copied().filter(|p| termed.insert(*p)).collect();
            signal_all(&new, libc::SIGTERM);
        }
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 20_000_000 };
        // SAFETY: sigtimedwait(2) with the blocked set, no info wanted, and a valid timeout.
        let got = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
        if got == libc::SIGTERM || got == libc::SIGINT || got == libc::SIGHUP {
            deadline = Instant::now();
        }
    }
}

/// Runs `argv` under the guard and returns the exit code to end with (after re-raising a
/// signal the job died of, where it can). `grace`: how long the job's processes have between
/// `SIGTERM` and `SIGKILL` when stopped.
pub fn run(argv: &[String], grace: Duration) -> i32 {
    let Some((program, args)) = argv.split_first() else { return 127 };
    // SAFETY: plain libc calls on this process: prctl with integer arguments, signal sets on
    // the stack, getpid/getppid.
    let (me, parent, set) = unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        (libc::getpid(), libc::getppid(), set)
    };
    // The agent may have died before the death signal was armed.
    if parent == 1 {
        return 128 + libc::SIGTERM;
    }
    // The child starts as it would outside slaq: std does not reset the signal mask, and the
    // guard's blocked signals (SIGTERM among them) would be blocked in every process of the job.
    let mut command = std::process::Command::new(program);
    command.args(args);
    // SAFETY: between fork and exec only async-signal-safe calls on this thread's mask.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            match libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) {
                0 => Ok(()),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        });
    }
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("slaq job-guard: cannot start {program}: {e}");
            return 126;
        }
    };
    let main = child.id() as i32;
    let status = loop {
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };
        // SAFETY: sigtimedwait(2) with the blocked set, no info wanted, and a valid timeout.
        let got = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if got == libc::SIGTERM || got == libc::SIGINT || got == libc::SIGHUP {
            // Stopped (by the agent, or because it died): everything goes.
            // SAFETY: getppid(2) takes nothing.
            let orphaned = unsafe { libc::getppid() } != parent;
            let grace = if orphaned { grace.min(Duration::from_secs(1)) } else { grace };
            let status = stop_all(me, main, grace, None, &set);
            break status.unwrap_or(libc::SIGTERM);
        }
        // A child ended (or the timeout): if it is the job's own process, what it left goes.
        if let Some(status) = reap(main) {
            break stop_all(me, main, grace.min(Duration::from_secs(2)), Some(status), &set).unwrap_or(status);
        }
        // SAFETY: getppid(2) takes nothing.
        if unsafe { libc::getppid() } != parent {
            // The death signal was missed (the agent's thread that spawned us exited first).
            break stop_all(me, main, grace.min(Duration::from_secs(1)), None, &set).unwrap_or(libc::SIGTERM);
        }
    };
    end_as(status)
}

/// The exit code for a wait status, re-raising the signal the job died of where it can.
fn end_as(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status);
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: default action for the signal, unblocked, raised on this process.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
        }
        return 128 + signal;
    }
    1
}

/// Stops (`SIGKILL`) the processes an earlier run of this agent left: those whose environment
/// holds `SLAQ_WORKER=<worker>`, `SLAQ_PREFIX=<prefix>` and `SLAQ_NATS=<nats>` exactly as the
/// agent gives them to a job, other than this process and its ancestors. Returns how many.
pub fn stop_leftovers(worker: &str, prefix: &str, nats: &str) -> usize {
    let me = std::process::id() as i32;
    let mut ancestors = HashSet::from([me]);
    let mut p = me;
    while let Some(parent) = parent_of(p).filter(|&q| q > 1 && ancestors.insert(q)) {
        p = parent;
    }
    let wanted = [format!("SLAQ_WORKER={worker}"), format!("SLAQ_PREFIX={prefix}"), format!("SLAQ_NATS={nats}")];
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if ancestors.contains(&pid) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let vars: HashSet<&[u8]> = environ.split(|&b| b == 0).collect();
        if wanted.iter().all(|w| vars.contains(w.as_bytes())) {
            found.push(pid);
        }
    }
    signal_all(&found, libc::SIGKILL);
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_command_with_spaces_and_parens() {
        let me = std::process::id() as i32;
        // SAFETY: getppid(2) takes nothing.
        assert_eq!(parent_of(me), Some(unsafe { libc::getppid() }));
        assert!(descendants(me).is_empty() || descendants(me).iter().all(|p| *p != me));
    }
}
