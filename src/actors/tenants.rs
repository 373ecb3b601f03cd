//! The tenants a running scheduler serves (`[tenants]`, issue #32), shared by the ingest loop
//! (which refuses jobs of tenants not served) and the allocator (which plans each tenant inside
//! its quota), and replaced whole by a reload.

use std::sync::{Arc, RwLock};

use crate::schedule::tenants::TenantSet;

/// The tenants a running scheduler serves, shared by its ingest loop and its allocator and
/// replaced whole by a reload (`slaq serve` on SIGHUP): every clone sees the same.
#[derive(Clone, Debug, Default)]
pub struct Tenants(Arc<RwLock<Option<Arc<TenantSet>>>>);

impl Tenants {
    pub fn new(set: Option<TenantSet>) -> Self {
        Tenants(Arc::new(RwLock::new(set.map(Arc::new))))
    }

    /// The tenants now (`None`: one flat pool).
    pub fn get(&self) -> Option<Arc<TenantSet>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Serves `set` from the next message and the next epoch on.
    pub fn set(&self, set: Option<TenantSet>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = set.map(Arc::new);
    }
}
