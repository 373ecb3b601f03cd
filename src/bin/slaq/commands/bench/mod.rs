//! `slaq bench`: the scheduler's own costs, one file per benchmark. `alloc`, `placement` and
//! `merge` are decisions in memory; the others run the scheduler (in this process, or as
//! replicas for `cluster`) against a NATS server.

mod alloc;
mod cluster;
mod epoch;
mod idle;
mod ingest;
mod merge;
mod placement;
mod scale;
mod soak;
mod support;
mod typed;

use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Time one full allocation decision (gain curves included) for each policy.
    Alloc(alloc::BenchAllocArgs),
    /// Loss reports per second from NATS into the job actors, next to raw NATS pub/sub.
    Ingest(ingest::BenchIngestArgs),
    /// Epoch latency (bids, policy, publish) and memory with many jobs and workers.
    Epoch(epoch::BenchEpochArgs),
    /// A long run under steady load: memory sampled over time (flat after warm-up?), epochs
    /// and message counts.
    Soak(soak::BenchSoakArgs),
    /// CPU and memory of the scheduler holding many jobs that report nothing more.
    Idle(idle::BenchIdleArgs),
    /// Placement methods against the exact optimum on small instances, and time per decision.
    Placement(placement::BenchPlacementArgs),
    /// What the leader pays to take its replicas' bids (issue #19): encode, decode, tabulate
    /// and merge one bid per job, and the bytes on the wire.
    Merge(merge::BenchMergeArgs),
    /// Replicas that share the jobs (issue #19), measured from outside: epochs, each replica's
    /// CPU per report, and a replica killed (-9). Needs a NATS server whose account maps the
    /// reports to the partitions (deploy/bench-cluster.sh starts a three-node cluster so).
    Cluster(cluster::BenchClusterArgs),
    /// The allocator's epoch alone (no bus) as the cluster grows at a fixed churn (issue
    /// #44): time, CPU and memory per size, and a plot of the time against the workers.
    Scale(scale::BenchScaleArgs),
}

pub(crate) fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Alloc(args) => alloc::run(args),
        BenchCommand::Ingest(args) => ingest::run(args),
        BenchCommand::Epoch(args) => epoch::run(args),
        BenchCommand::Soak(args) => soak::run(args),
        BenchCommand::Idle(args) => idle::run(args),
        BenchCommand::Placement(args) => placement::run(args),
        BenchCommand::Merge(args) => merge::run(args),
        BenchCommand::Cluster(args) => cluster::run(args),
        BenchCommand::Scale(args) => scale::run(args),
    }
}
