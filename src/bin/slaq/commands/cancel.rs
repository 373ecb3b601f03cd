//! `slaq cancel`: ends a submitted job.

use std::time::Duration;

use anyhow::Context;
use slaq::bus;
use slaq::protocol::{self, Encoding, EndReason, JobEnd, Subjects};

use crate::common::NatsArgs;

#[derive(clap::Args)]
pub(crate) struct CancelArgs {
    #[arg(long)]
    pub(crate) job: String,
    #[command(flatten)]
    pub(crate) bus: NatsArgs,
}

pub(crate) fn run(args: CancelArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        protocol::valid_job_id(&args.job),
        "--job must be NAME or TENANT.NAME, each 1-64 characters from [A-Za-z0-9_-]"
    );
    let subjects = Subjects::new(&args.bus.prefix)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let (client, _) = bus::connect_with(&args.bus.nats, "slaq-cancel", 16, &args.bus.auth.to_auth()).await?;
        let bye = JobEnd { job: args.job.clone(), reason: EndReason::Cancelled };
        bus::publish(&client, subjects.job_bye(&args.job), Encoding::MsgPack, &bye).await?;
        tokio::time::timeout(Duration::from_secs(5), client.flush())
            .await
            .context("NATS did not take the cancellation within 5 s")??;
        Ok::<_, anyhow::Error>(())
    })?;
    eprintln!("cancelled {}", args.job);
    Ok(())
}
