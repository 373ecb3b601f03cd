//! One file per command: its flags (`clap::Args`) and its `run`.

pub(crate) mod bench;
pub(crate) mod cancel;
pub(crate) mod emulate;
pub(crate) mod job_guard;
pub(crate) mod predict;
pub(crate) mod serve;
pub(crate) mod simulate;
pub(crate) mod status;
pub(crate) mod submit;
pub(crate) mod worker;
