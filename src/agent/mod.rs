//! The reference worker agent (`slaq worker`): it says hello, sends heartbeats and follows its
//! assignments, optionally running a command for each one. A shell over NATS like `service`;
//! the binary only parses flags and passes the client and the shutdown signal in.
//!
//! The command of a job runs once per generation of the job ([`Launch`]), with torchrun's
//! environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT`) and slaq's (`SLAQ_JOB`, `SLAQ_WORKER`, `SLAQ_GENERATION`,
//! `SLAQ_ROLE`, `SLAQ_BATCH_SIZE`, `SLAQ_EPOCH`, `SLAQ_TERM`, `SLAQ_ACCELERATOR`), in a process group of its own.
//! When the job's membership changes, the process group gets SIGTERM, then SIGKILL after
//! `stop_grace`, and the new generation starts once it is gone; a worker told again what it
//! runs (the same job and generation) leaves its process alone.
//!
//! What runs: a submitted job's command (`JobCommand`, on the assignment) as its arguments,
//! never through a shell, if `allow_command` allows it; or, with `exec` set, `sh -c EXEC` with
//! the job's arguments as its positional parameters (`"$@"`: a launcher that wraps or vets
//! them); or, for a job without a command, `exec` alone. A process that ends by itself is
//! reported in the heartbeats (`Running::exit`): the scheduler restarts a failed generation.

pub mod allow;
pub mod guard;

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use tracing::{debug, info, warn};

use crate::bus::{self, BusError};
use crate::protocol::{self, Ack, Encoding, Heartbeat, Launch, Running, Subjects, WorkerAssignment, WorkerSpec};

/// What the agent is and does.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub subjects: Subjects,
    pub spec: WorkerSpec,
    pub beat_every: Duration,
    /// Run through `sh -c` for each generation of the job the worker is assigned, with the
    /// environment of the module's doc. The previous one is stopped first.
    pub exec: Option<String>,
    /// How long a stopped process has between SIGTERM and SIGKILL (to save a checkpoint).
    pub stop_grace: Duration,
    /// How long one hello waits for the scheduler's answer before it is sent again.
    pub hello_timeout: Duration,
    /// Which submitted commands run without `exec` (see [`allow`]); any other is refused
    /// (exit 126, counted).
    pub commands: allow::Commands,
    /// Which variables a submitted job's environment may set (see [`allow`]); a command whose
    /// environment sets another is refused.
    pub env_allowed: allow::EnvAllowed,
    /// Given to the job's processes as `SLAQ_NATS` (where to report; no credentials).
    pub nats_url: Option<String>,
    /// The `slaq` binary whose `job-guard` runs each job's command (see [`guard`]): no
    /// process of the job outlives the agent. `None` (an agent in a test process): the
    /// command is the agent's child, stopped with the agent only by the parent-death signal.
    pub guard: Option<std::path::PathBuf>,
}

/// How long a hello waits for the scheduler's answer before it is sent again, by default.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);

impl AgentConfig {
    pub fn new(subjects: Subjects, spec: WorkerSpec) -> Self {
        AgentConfig {
            subjects,
            spec,
            beat_every: Duration::from_secs(2),
            exec: None,
            stop_grace: Duration::from_secs(30),
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            commands: allow::Commands::Any,
            env_allowed: allow::EnvAllowed::default(),
            nats_url: None,
            guard: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("invalid worker spec")]
    Spec(#[from] protocol::ProtocolError),
    #[error(transparent)]
    Bus(#[from] BusError),
}

/// Why an assignment is not followed.
/// Where an assignment stands in the order the agent follows them: by the term of the
/// scheduler that sent it (a leader's lease, or a restart's incarnation; none counts as 0),
/// then by epoch, which each scheduler counts from 1.
fn order(assignment: &WorkerAssignment) -> (u64, u64) {
    (assignment.term.unwrap_or(0), assignment.epoch)
}

fn check_assignment(assignment: &WorkerAssignment, me: &str, last: (u64, u64)) -> Result<(), &'static str> {
    if assignment.worker != me {
        return Err("addressed to another worker");
    }
    if assignment.job.as_deref().is_some_and(|j| !protocol::valid_job_id(j)) {
        return Err("job id is not NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]");
    }
    if let Some(launch) = &assignment.launch {
        if assignment.job.is_none() {
            return Err("ranks without a job");
        }
        launch.check()?;
    }
    if order(assignment).0 < last.0 {
        return Err("from a scheduler deposed since (an older term)");
    }
    if order(assignment) < last {
        return Err("older than an assignment already followed");
    }
    Ok(())
}

/// What a followed assignment does to the process the worker runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// The same job, role and generation: the process goes on untouched.
    Keep,
    /// Another job, role or generation: the process stops and the new one starts.
    Restart,
    /// An older generation of the job it runs, from the same scheduler: ignored.
    Stale,
}

/// Compares an assignment (already checked and in order) with what the worker runs.
fn change(running: &Running, role: protocol::Role, launch: Option<&Launch>, assignment: &WorkerAssignment) -> Change {
    if assignment.job != running.job || assignment.role != role {
        return Change::Restart;
    }
    match (launch, &assignment.launch) {
        // Told again without ranks (a re-tell after a restart that lost them): unchanged.
        (_, None) => Change::Keep,
        (Some(old), Some(new)) if old == new => Change::Keep,
        // Generations count per scheduler term; within one they only grow.
        (Some(old), Some(new)) if assignment.term.unwrap_or(0) == running.term && new.generation < old.generation => {
            Change::Stale
        }
        _ => Change::Restart,
    }
}

/// Exit code reported when the agent refuses a command or cannot start it.
pub const EXIT_REFUSED: i32 = 126;

/// What the agent runs for an assignment: a program and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Program {
    argv: Vec<String>,
    /// The submitted command's environment, working directory and checkpoint directory.
    env: Vec<(String, String)>,
    cwd: Option<String>,
}

/// What to run for `assignment` (`None`: nothing, the worker only follows), or why not.
fn program(config: &AgentConfig, assignment: &WorkerAssignment) -> Result<Option<Program>, &'static str> {
    assignment.job.as_ref().ok_or("no job")?;
    let shell = |script: &str, rest: &[String]| {
        let mut argv = vec!["sh".to_string(), "-c".into(), script.to_string(), "slaq-job".into()];
        argv.extend_from_slice(rest);
        argv
    };
    let Some(command) = &assignment.command else {
        return Ok(config.exec.as_deref().map(|e| Program { argv: shell(e, &[]), env: Vec::new(), cwd: None }));
    };
    // The submitter's environment reaches a launcher too (`BASH_ENV` runs code in `sh`).
    if command.env.keys().any(|k| !protocol::reserved_env(k) && !config.env_allowed.allows(k)) {
        return Err("the command's environment sets a variable this agent does not allow (--allow-env)");
    }
    let argv = match &config.exec {
        Some(launcher) => shell(launcher, &command.argv),
        None => {
            let cwd = command.cwd.as_deref().map(std::path::Path::new);
            let program = config.commands.check(&command.argv, cwd)?;
            // The program as checked, not its name looked up again.
            let mut argv = command.argv.clone();
            argv[0] = program.to_string_lossy().into_owned();
            argv
        }
    };
    let mut env: Vec<(String, String)> =
        command.env.iter().filter(|(k, _)| !protocol::reserved_env(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(dir) = &command.checkpoint_dir {
        env.push(("SLAQ_CHECKPOINT_DIR".into(), dir.clone()));
    }
    Ok(Some(Program { argv, env, cwd: command.cwd.clone() }))
}

/// A job's process group, started by the agent.
struct Process {
    child: tokio::process::Child,
    /// The group's id (the leader's pid), kept: once the leader is reaped the child forgets it.
    pgid: Option<i32>,
    /// The leader is the job's guard, which stops what the job started itself.
    guarded: bool,
    /// Between SIGTERM and SIGKILL when it is stopped ([`grace_of`]).
    grace: Duration,
}

/// An exit status as one code: the exit code, or 128 + the signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

/// The longest a process has been given between SIGTERM and SIGKILL by its assignment.
const MAX_STOP_GRACE: Duration = Duration::from_secs(3600);

/// A process's grace: its job's (its tenant's `grace_s`, on the assignment), else the agent's.
fn grace_of(config: &AgentConfig, assignment: &WorkerAssignment) -> Duration {
    assignment.stop_grace_ms.map_or(config.stop_grace, |ms| Duration::from_millis(ms).min(MAX_STOP_GRACE))
}

impl Process {
    fn start(
        config: &AgentConfig,
        program: &Program,
        assignment: &WorkerAssignment,
        job: &str,
    ) -> std::io::Result<Process> {
        let me = config.spec.worker.as_str();
        let mut command = match &config.guard {
            Some(slaq) => {
                let mut c = tokio::process::Command::new(slaq);
                let grace_ms = grace_of(config, assignment).as_millis().to_string();
                c.args([guard::SUBCOMMAND, "--grace-ms", &grace_ms, "--"]).args(&program.argv);
                c
            }
            None => {
                let mut c = tokio::process::Command::new(&program.argv[0]);
                c.args(&program.argv[1..]);
                c
            }
        };
        command.envs(program.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &program.cwd {
            command.current_dir(dir);
        }
        if let Some(url) = &config.nats_url {
            command.env("SLAQ_NATS", url);
        }
        command
            .env("SLAQ_PREFIX", config.subjects.prefix())
            .env("SLAQ_JOB", job)
            .env("SLAQ_WORKER", me)
            .env("SLAQ_EPOCH", assignment.epoch.to_string())
            .env("SLAQ_TERM", assignment.term.unwrap_or(0).to_string())
            .env("SLAQ_ROLE", if assignment.role == protocol::Role::Ps { "ps" } else { "worker" })
            .env("SLAQ_ACCELERATOR", config.spec.kind.as_deref().unwrap_or("default"))
            // Its own process group, so that stopping it reaches what it started.
            .process_group(0)
            .kill_on_drop(true);
        // If the agent dies (even by SIGKILL), so does the process: a job's process must not
        // go on in a world the scheduler has given to others. The guard gets SIGTERM and stops
        // everything the job started; a bare command gets SIGKILL.
        let death = if config.guard.is_some() { libc::SIGTERM } else { libc::SIGKILL };
        #[cfg(target_os = "linux")]
        // SAFETY: the closure runs in the child between fork and exec, and calls only prctl(2),
        // which is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, death) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if let Some(l) = &assignment.launch {
            command
                .env("RANK", l.rank.to_string())
                .env("WORLD_SIZE", l.world_size.to_string())
                .env("LOCAL_RANK", l.local_rank.to_string())
                .env("LOCAL_WORLD_SIZE", l.local_world_size.to_string())
                .env("GROUP_RANK", l.group_rank.to_string())
                .env("MASTER_ADDR", &l.master_addr)
                .env("MASTER_PORT", l.master_port.to_string())
                .env("SLAQ_GENERATION", l.generation.to_string());
            if let Some(b) = l.batch_size {
                command.env("SLAQ_BATCH_SIZE", b.to_string());
            }
        }
        let child = command.spawn()?;
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        Ok(Process { child, pgid, guarded: config.guard.is_some(), grace: grace_of(config, assignment) })
    }

    /// Sends `signal` to the whole process group.
    fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.pgid {
            // SAFETY: kill(2) takes plain integers; a negative pid names the process group the
            // child leads (`process_group(0)`). The group lives while any member does (what the
            // leader started, after the leader is gone); its id is not reused until it is empty.
            unsafe {
                libc::kill(-pid, signal);
            }
        }
    }

    /// SIGTERM to the group, then SIGKILL if the leader has not exited within its grace, or
    /// within `cap` when shorter (its worker taken for another tenant's job: that tenant's
    /// terms); returns once it has (the group is killed either way, so nothing it started
    /// lingers).
    async fn stop(mut self, cap: Option<Duration>) {
        let grace = cap.map_or(self.grace, |c| c.min(self.grace));
        self.signal(libc::SIGTERM);
        let mut exited = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        if !exited && self.guarded {
            // A guard kills what is left (outside the group too) once its own grace is over, or
            // at once on a second SIGTERM when the grace here is shorter.
            if grace < self.grace {
                self.signal(libc::SIGTERM);
            }
            exited = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.is_ok();
        }
        if !exited {
            warn!(grace_s = grace.as_secs_f64(), "a job's process ignored SIGTERM: killed");
        }
        self.signal(libc::SIGKILL);
        let _ = self.child.wait().await;
    }
}

/// Runs the agent until `shutdown` resolves or the connection closes for good. The scheduler
/// may not be up yet: hello is repeated until it is answered.
pub async fn run(
    client: async_nats::Client,
    config: AgentConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let me = config.spec.worker.clone();
    config.spec.validate(&me)?;
    // What an earlier run of this agent left (its guards killed with it) goes first.
    if let Some(url) = &config.nats_url {
        let stopped = guard::stop_leftovers(&me, config.subjects.prefix(), url);
        if stopped > 0 {
            warn!(worker = %me, processes = stopped, "stopped processes an earlier run of this agent left");
        }
    }
    let mut assignments = bus::subscribe(&client, config.subjects.worker_assign(&me)).await?;
    tokio::pin!(shutdown);
    let mut agent = Agent::new(&client, &config);
    // Registered: the first term a scheduler answered with.
    agent.confirmed_term = loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            answered = agent.hello() => if let Some(term) = answered { break term },
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    info!(worker = %me, term = agent.confirmed_term, "registered");
    let mut beat = tokio::time::interval(config.beat_every);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            () = stopped(&mut agent.stopping), if agent.stopping.is_some() => agent.on_stopped().await,
            status = exited(&mut agent.process), if agent.process.is_some() => agent.on_exit(status).await,
            _ = beat.tick() => agent.beat().await,
            message = assignments.next() => {
                let Some(message) = message else { break };
                agent.on_assignment(&message.payload).await;
            }
        }
    }
    agent.finish().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), client.flush()).await;
    Ok(())
}

/// Waits until the process being stopped is gone.
async fn stopped(stopping: &mut Option<tokio::task::JoinHandle<()>>) {
    if let Some(s) = stopping.as_mut() {
        let _ = s.await;
    }
}

/// Waits until the job's process exits by itself (never, without one).
async fn exited(process: &mut Option<Process>) -> std::io::Result<std::process::ExitStatus> {
    match process.as_mut() {
        Some(p) => p.child.wait().await,
        None => std::future::pending().await,
    }
}

/// The agent's state between events: what it runs, what it was told last and what the
/// schedulers confirmed. Each event of [`run`]'s loop is one method.
struct Agent<'a> {
    client: &'a async_nats::Client,
    config: &'a AgentConfig,
    me: &'a str,
    /// The largest term a scheduler has answered a hello with: an assignment of a larger term is
    /// followed only once a hello confirms it, so a forged one (any term, up to 2^64 − 1) cannot
    /// make the agent ignore the real scheduler.
    confirmed_term: u64,
    /// The (term, epoch) of the last assignment followed.
    last: (u64, u64),
    /// What it runs, as its heartbeats tell the scheduler.
    running: Running,
    role: protocol::Role,
    launch: Option<Launch>,
    process: Option<Process>,
    /// A process being stopped, and the assignment to start once it is gone.
    stopping: Option<tokio::task::JoinHandle<()>>,
    to_start: Option<WorkerAssignment>,
}

impl<'a> Agent<'a> {
    fn new(client: &'a async_nats::Client, config: &'a AgentConfig) -> Self {
        Agent {
            client,
            config,
            me: &config.spec.worker,
            confirmed_term: 0,
            last: (0, 0),
            running: Running { job: None, term: 0, epoch: 0, generation: None, exit: None, refused: 0 },
            role: protocol::Role::Worker,
            launch: None,
            process: None,
            stopping: None,
            to_start: None,
        }
    }

    /// Says hello: the term of the scheduler that answered, if one did.
    async fn hello(&self) -> Option<u64> {
        let subject = self.config.subjects.worker_hello(self.me);
        match bus::request::<_, Ack>(
            self.client,
            subject,
            Encoding::MsgPack,
            &self.config.spec,
            self.config.hello_timeout,
        )
        .await
        {
            Ok(ack) if ack.ok => Some(ack.term.unwrap_or(0)),
            Ok(ack) => {
                warn!(error = ack.error.unwrap_or_default(), "the scheduler refused the worker; retrying");
                None
            }
            Err(e) => {
                warn!(error = %e, "hello not answered yet; retrying");
                None
            }
        }
    }

    /// Tells the scheduler what it runs.
    async fn beat(&self) {
        let beat = Heartbeat { running: Some(self.running.clone()), ..Heartbeat::new(self.me) };
        let subject = self.config.subjects.worker_beat(self.me);
        // Bounded: while NATS is away the client's buffer fills, and a publish waiting on it
        // would stall the agent (no shutdown, no assignment) until NATS is back.
        let every = self.config.beat_every;
        match tokio::time::timeout(every, bus::publish(self.client, subject, Encoding::MsgPack, &beat)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "heartbeat failed"),
            Err(_) => debug!("heartbeat dropped: the connection's buffer is full"),
        }
    }

    /// Starts what `assignment` runs; a refusal is the generation's exit, told at once.
    async fn launch_process(&mut self, assignment: &WorkerAssignment) {
        match start(self.config, assignment) {
            Ok(p) => self.process = p,
            Err(code) => {
                self.process = None;
                self.running.refused += 1;
                self.running.exit = Some(code);
                self.beat().await;
            }
        }
    }

    /// The old process is gone: the assignment waiting for it starts.
    async fn on_stopped(&mut self) {
        self.stopping = None;
        if let Some(assignment) = self.to_start.take() {
            self.launch_process(&assignment).await;
        }
    }

    /// The process ended by itself: whatever it left in its group goes too, and the scheduler
    /// hears it at once (non-zero: the generation failed).
    async fn on_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        let code = status.map_or(EXIT_REFUSED, exit_code);
        if let Some(p) = self.process.take() {
            p.signal(libc::SIGKILL);
        }
        self.running.exit = Some(code);
        let running = &self.running;
        info!(worker = %self.me, job = ?running.job, generation = ?running.generation, code, "the job's process exited");
        self.beat().await;
    }

    /// An assignment arrived: checked (its worker, its order, its term confirmed by a hello,
    /// not an older generation), then followed: the process is left alone if it runs what it
    /// is told, else stopped and the new one started once it is gone.
    async fn on_assignment(&mut self, payload: &[u8]) {
        let me = self.me;
        let assignment: WorkerAssignment = match protocol::decode(Encoding::MsgPack, payload, "assignment") {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "ignoring an undecodable assignment");
                return;
            }
        };
        if assignment.hello_again && assignment.worker == me {
            // The scheduler lost track of us (a restart without state): register again.
            // The job we run goes on until an assignment says otherwise.
            info!(worker = %me, "the scheduler asked for a new hello");
            if let Some(term) = self.hello().await {
                self.confirmed_term = self.confirmed_term.max(term);
            }
            return;
        }
        if let Err(why) = check_assignment(&assignment, me, self.last) {
            self.running.refused += 1;
            warn!(epoch = assignment.epoch, term = ?assignment.term, job = ?assignment.job, why, refused = self.running.refused, "ignoring an assignment");
            return;
        }
        let term = order(&assignment).0;
        if term > self.confirmed_term {
            match self.hello().await {
                Some(answered) if answered >= term => self.confirmed_term = answered,
                answered => {
                    self.running.refused += 1;
                    warn!(term, answered = ?answered, refused = self.running.refused, "ignoring an assignment of a term no scheduler confirms");
                    return;
                }
            }
        }
        let change = change(&self.running, self.role, self.launch.as_ref(), &assignment);
        if change == Change::Stale {
            self.running.refused += 1;
            warn!(worker = %me, job = ?assignment.job, generation = ?assignment.launch.as_ref().map(|l| l.generation), "ignoring an older generation of the job it runs");
            return;
        }
        self.last = order(&assignment);
        self.running.term = term;
        self.running.epoch = assignment.epoch;
        if change == Change::Keep {
            // Told again what it runs (a new term's first epoch, or a correction that crossed a
            // move): the process goes on untouched.
            debug!(worker = %me, epoch = assignment.epoch, job = ?assignment.job, "assignment unchanged");
            return;
        }
        self.role = assignment.role;
        self.launch = assignment.launch.clone();
        self.running.job = assignment.job.clone();
        self.running.generation = self.launch.as_ref().map(|l| l.generation);
        self.running.exit = None;
        info!(worker = %me, epoch = assignment.epoch, job = ?assignment.job, generation = ?self.running.generation, rank = ?self.launch.as_ref().map(|l| l.rank), "assignment");
        if let Some(old) = self.process.take() {
            let cap = assignment.reclaim_grace_ms.map(|ms| Duration::from_millis(ms).min(MAX_STOP_GRACE));
            self.stopping = Some(tokio::spawn(old.stop(cap)));
        }
        self.to_start = assignment.job.is_some().then_some(assignment);
        if self.stopping.is_none()
            && let Some(assignment) = self.to_start.take()
        {
            self.launch_process(&assignment).await;
        }
    }

    /// Nothing of a job outlives its agent.
    async fn finish(mut self) {
        if let Some(old) = self.process.take() {
            old.stop(None).await;
        }
        if let Some(s) = self.stopping.take() {
            let _ = s.await;
        }
    }
}

/// Starts a job's command for `assignment` (logged, not fatal, if it cannot start).
/// Starts what `assignment` runs. `Err(code)`: refused or not startable (logged), to be
/// reported as the generation's exit code.
fn start(config: &AgentConfig, assignment: &WorkerAssignment) -> Result<Option<Process>, i32> {
    let Some(job) = assignment.job.as_deref() else { return Ok(None) };
    let program = match program(config, assignment) {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(None),
        Err(why) => {
            warn!(worker = %config.spec.worker, job, why, "refusing to run the job's command");
            return Err(EXIT_REFUSED);
        }
    };
    match Process::start(config, &program, assignment, job) {
        Ok(p) => Ok(Some(p)),
        Err(e) => {
            warn!(worker = %config.spec.worker, job, program = %program.argv[0], error = %e, "cannot start the job's command");
            Err(EXIT_REFUSED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(worker: &str, epoch: u64, job: Option<&str>) -> WorkerAssignment {
        WorkerAssignment {
            worker: worker.into(),
            epoch,
            job: job.map(str::to_string),
            role: Default::default(),
            hello_again: false,
            term: None,
            launch: None,
            command: None,
            stop_grace_ms: None,
            reclaim_grace_ms: None,
        }
    }

    #[test]
    fn a_process_s_grace_is_its_job_s_when_the_assignment_says_it() {
        let config = AgentConfig::new(
            Subjects::new("slaq").unwrap(),
            WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None },
        );
        assert_eq!(grace_of(&config, &assignment("w1", 1, Some("j"))), config.stop_grace);
        let told = WorkerAssignment { stop_grace_ms: Some(90_000), ..assignment("w1", 1, Some("t.j")) };
        assert_eq!(grace_of(&config, &told), Duration::from_secs(90));
        let huge = WorkerAssignment { stop_grace_ms: Some(u64::MAX), ..told };
        assert_eq!(grace_of(&config, &huge), MAX_STOP_GRACE);
    }

    #[test]
    fn assignments_are_checked_before_they_are_followed() {
        assert!(check_assignment(&assignment("w1", 3, Some("j")), "w1", (0, 2)).is_ok());
        assert!(check_assignment(&assignment("w1", 3, None), "w1", (0, 3)).is_ok());
        assert!(check_assignment(&assignment("w2", 3, Some("j")), "w1", (0, 0)).is_err());
        assert!(check_assignment(&assignment("w1", 3, Some("j; rm -rf /")), "w1", (0, 0)).is_err());
        assert!(check_assignment(&assignment("w1", 1, Some("j")), "w1", (0, 2)).is_err());
    }

    fn launch(generation: u64, rank: u32, world_size: u32) -> Launch {
        Launch {
            generation,
            world_size,
            rank,
            local_rank: 0,
            local_world_size: 1,
            group_rank: rank,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            batch_size: None,
        }
    }

    #[test]
    fn a_process_restarts_on_a_new_generation_only() {
        let with = |job: Option<&str>, l: Option<Launch>| WorkerAssignment { launch: l, ..assignment("w1", 5, job) };
        let runs = Running { job: Some("j".into()), term: 0, epoch: 4, generation: Some(3), exit: None, refused: 0 };
        let role = protocol::Role::Worker;
        let now = launch(3, 1, 2);
        // Told again the same: untouched; told again without ranks (a re-tell): untouched.
        assert_eq!(change(&runs, role, Some(&now), &with(Some("j"), Some(now.clone()))), Change::Keep);
        assert_eq!(change(&runs, role, Some(&now), &with(Some("j"), None)), Change::Keep);
        // A new generation of the same job (it grew), another job, idle, another role: restart.
        assert_eq!(change(&runs, role, Some(&now), &with(Some("j"), Some(launch(4, 1, 4)))), Change::Restart);
        assert_eq!(change(&runs, role, Some(&now), &with(Some("k"), Some(launch(1, 0, 1)))), Change::Restart);
        assert_eq!(change(&runs, role, Some(&now), &with(None, None)), Change::Restart);
        let ps = WorkerAssignment { role: protocol::Role::Ps, ..with(Some("j"), Some(now.clone())) };
        assert_eq!(change(&runs, role, Some(&now), &ps), Change::Restart);
        // The same generation number with another world (a scheduler that restarted without
        // its state counts again): restart, never two worlds under one number.
        assert_eq!(change(&runs, role, Some(&now), &with(Some("j"), Some(launch(3, 0, 3)))), Change::Restart);
        // An older generation from the same scheduler term: ignored; from a new term: followed.
        assert_eq!(change(&runs, role, Some(&now), &with(Some("j"), Some(launch(2, 0, 1)))), Change::Stale);
        let new_term = WorkerAssignment { term: Some(7), ..with(Some("j"), Some(launch(1, 0, 1))) };
        assert_eq!(change(&runs, role, Some(&now), &new_term), Change::Restart);
    }

    #[test]
    fn what_an_assignment_runs() {
        let spec = WorkerSpec { worker: "w1".into(), machine: None, slots: 1, kind: None, advertise: None };
        let config = AgentConfig::new(Subjects::new("slaq").unwrap(), spec);
        let command = protocol::JobCommand {
            env: [("LR".to_string(), "0.1".to_string()), ("RANK".to_string(), "7".to_string())].into(),
            checkpoint_dir: Some("/ckpt".into()),
            ..protocol::JobCommand::new(vec!["sh".into(), "-e".into(), "a b".into()])
        };
        let submitted = WorkerAssignment { command: Some(command.clone()), ..assignment("w1", 3, Some("j")) };
        // As given, never through a shell, its program resolved on the agent's PATH; reserved
        // names dropped even if a sender slipped them in.
        let p = program(&config, &submitted).unwrap().unwrap();
        assert!(p.argv[0].starts_with('/') && p.argv[0].ends_with("/sh"), "{:?}", p.argv);
        assert_eq!(p.argv[1..], ["-e", "a b"]);
        assert_eq!(p.env, [("LR".to_string(), "0.1".to_string()), ("SLAQ_CHECKPOINT_DIR".into(), "/ckpt".into())]);
        // An allow list: the program and the entry's words.
        let list = |entries: &[&str]| {
            allow::Commands::Allowed(entries.iter().map(|e| allow::Entry::parse(e).unwrap()).collect())
        };
        let strict = AgentConfig { commands: list(&["sh -e"]), ..config.clone() };
        assert!(program(&strict, &submitted).unwrap().is_some());
        let other = AgentConfig { commands: list(&["sh /"]), ..config.clone() };
        assert!(program(&other, &submitted).is_err());
        // A loader's variable is refused unless named, whatever runs.
        let preload = protocol::JobCommand {
            env: [("LD_PRELOAD".to_string(), "/tmp/x.so".to_string()), ("LR".to_string(), "0.1".to_string())].into(),
            ..command.clone()
        };
        let preloaded = WorkerAssignment { command: Some(preload), ..assignment("w1", 3, Some("j")) };
        assert!(program(&config, &preloaded).is_err());
        let named =
            AgentConfig { env_allowed: allow::EnvAllowed::new(&["LD_PRELOAD".into()]).unwrap(), ..config.clone() };
        assert!(program(&named, &preloaded).is_err(), "with a list, LR is not named");
        let both = allow::EnvAllowed::new(&["LD_PRELOAD".into(), "LR".into()]).unwrap();
        assert!(program(&AgentConfig { env_allowed: both, ..config.clone() }, &preloaded).unwrap().is_some());
        // A launcher gets the arguments as "$@" (and the allow list is its business).
        let launcher = AgentConfig { exec: Some("exec sandbox \"$@\"".into()), ..other };
        assert!(program(&launcher, &preloaded).is_err(), "the environment reaches a launcher too");
        let p = program(&launcher, &submitted).unwrap().unwrap();
        assert_eq!(p.argv, ["sh", "-c", "exec sandbox \"$@\"", "slaq-job", "sh", "-e", "a b"]);
        // No command: the agent's own --exec, or nothing; idle: nothing.
        assert_eq!(program(&launcher, &assignment("w1", 3, Some("j"))).unwrap().unwrap().argv.len(), 4);
        assert!(program(&config, &assignment("w1", 3, Some("j"))).unwrap().is_none());
        assert!(program(&config, &assignment("w1", 3, None)).is_err());
    }

    #[test]
    fn inconsistent_ranks_are_refused() {
        let with = |l: Launch| WorkerAssignment { launch: Some(l), ..assignment("w1", 3, Some("j")) };
        assert!(check_assignment(&with(launch(1, 1, 2)), "w1", (0, 0)).is_ok());
        assert_eq!(check_assignment(&with(launch(1, 2, 2)), "w1", (0, 0)), Err("rank outside the world"));
        assert!(check_assignment(&with(Launch { local_rank: 1, ..launch(1, 1, 2) }), "w1", (0, 0)).is_err());
        assert!(check_assignment(&with(Launch { master_port: 0, ..launch(1, 0, 2) }), "w1", (0, 0)).is_err());
        assert!(
            check_assignment(&with(Launch { master_addr: "a b".into(), ..launch(1, 0, 2) }), "w1", (0, 0)).is_err()
        );
        assert!(
            check_assignment(&with(Launch { master_addr: "-oProxy".into(), ..launch(1, 0, 2) }), "w1", (0, 0)).is_err()
        );
        assert!(check_assignment(&with(Launch { group_rank: 2, ..launch(1, 1, 2) }), "w1", (0, 0)).is_err());
        let idle = WorkerAssignment { launch: Some(launch(1, 0, 1)), ..assignment("w1", 3, None) };
        assert_eq!(check_assignment(&idle, "w1", (0, 0)), Err("ranks without a job"));
    }

    #[test]
    fn a_newer_term_counts_epochs_afresh_and_an_older_one_is_ignored() {
        let with_term = |epoch, term| WorkerAssignment { term: Some(term), ..assignment("w1", epoch, Some("j")) };
        // A new leader (term 9) starts at epoch 1, after the old one (term 4) reached 500.
        assert!(check_assignment(&with_term(1, 9), "w1", (4, 500)).is_ok());
        // The deposed leader, still publishing, is not obeyed whatever its epoch.
        assert_eq!(
            check_assignment(&with_term(501, 4), "w1", (9, 1)),
            Err("from a scheduler deposed since (an older term)")
        );
        // A scheduler without terms after one with: older.
        assert!(check_assignment(&assignment("w1", 900, Some("j")), "w1", (9, 1)).is_err());
    }
}
