//! `slaq simulate`: a workload of jobs replaying real loss curves under several policies, or
//! (by its flags) Pollux's workloads (`pollux`), Gavel's typed cluster (`gavel`), or teams
//! (`teams`).

mod args;
mod curves;
mod gavel;
mod pollux;
mod teams;

pub(crate) use args::SimulateArgs;

pub(crate) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    if !args.pollux_workload.is_empty() {
        return pollux::run(&args);
    }
    if let Some(path) = &args.gavel_throughputs {
        return gavel::run(&args, path);
    }
    if let Some(path) = &args.tenants {
        return teams::run(&args, path);
    }
    curves::run(&args)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Cli, Command};

    #[test]
    fn simulate_defaults_are_the_library_defaults() {
        let cli = Cli::parse_from(["slaq", "simulate", "--curves", "x.jsonl"]);
        let Command::Simulate(args) = cli.command else { panic!("simulate expected") };
        assert!(args.workers.is_empty() && args.jobs.is_none(), "unset flags must leave the config's values");
    }
}
