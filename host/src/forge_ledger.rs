//! The forge tokens' ledger in the workspaces database (SPEC H5): every
//! token the app mints is written down with this process as its owner and
//! forgotten once revoked; a start revokes the tokens of owners that are
//! gone (a server killed mid-run).

use std::path::Path;
use std::sync::Arc;

use sandbox_gateway::app::{App, Ledger};
use sandbox_workspaces::store::Store;

struct StoreLedger {
    store: Store,
    owner: String,
}

impl Ledger for StoreLedger {
    fn minted(&self, token: &str, expires_at: &str) {
        if let Err(e) = self.store.record_token(token, &self.owner, expires_at) {
            tracing::warn!("the forge token ledger: {e}");
        }
    }

    fn revoked(&self, token: &str) {
        if let Err(e) = self.store.forget_token(token) {
            tracing::warn!("the forge token ledger: {e}");
        }
    }
}

/// Opens the ledger in `state_dir`, revokes what gone owners left, and
/// makes `app` write into it.
pub async fn keep(app: &Arc<App>, state_dir: &Path) -> anyhow::Result<()> {
    let store = Store::open(state_dir, true)?
        .ok_or_else(|| anyhow::anyhow!("the workspaces database could not be made"))?;
    let owner = sandbox_workspaces::owner::me();
    let left = store.claim_left_tokens(&owner, &sandbox_workspaces::owner::is_gone)?;
    let ledger = Arc::new(StoreLedger { store, owner });
    app.keep_ledger(ledger);
    for token in left {
        match app.revoke(&token).await {
            Ok(()) => tracing::info!("revoked a forge token a gone server left"),
            Err(e) => tracing::warn!("a forge token a gone server left: {e}"),
        }
    }
    Ok(())
}
