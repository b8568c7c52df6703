//! What of the user's toolchains and caches a plan shows, and how: each
//! toolchain bound read-only, each cache bound read-only for sandbox-init
//! to overlay (SPEC G4).

use super::*;

/// The toolchains and caches a plan shows.
pub(super) struct Shown {
    /// The toolchains' read-only views (masks apply to them).
    pub(super) views: Vec<View>,
    pub(super) overlays: Vec<crate::toolchains::Cache>,
    pub(super) skipped: Vec<(PathBuf, String)>,
}

impl Shown {
    /// Binds what no bind shows already: each toolchain read-only (an exec
    /// root), each cache read-only at its path for sandbox-init to mount
    /// its overlay on — neither when a bind lies inside it (a toolchain
    /// would show the bind's neighbours, an overlay would hide the bind).
    /// Masks for secrets under a toolchain come later with
    /// the others; a cache's are whiteouts in its overlay.
    pub(super) fn plan(
        found: &Found,
        views: &[View],
        bound_home: Option<&Path>,
        args: &mut Args,
        exec_from: &mut Vec<PathBuf>,
    ) -> Self {
        let by_bind = |host: &Path| views.iter().any(|v| v.guest_of(host).is_some());
        let mut shown = Self {
            views: Vec::new(),
            overlays: Vec::new(),
            skipped: found
                .skipped
                .iter()
                .map(|(p, why)| (p.clone(), why.to_string()))
                .collect(),
        };
        // A directory holding a bind would show the bind's neighbours.
        let holds_bind = |dir: &Path| {
            views
                .iter()
                .any(|v| v.guest.starts_with(dir) || v.host.starts_with(dir))
        };
        for t in &found.toolchains {
            let why = if by_bind(&t.host) {
                Some("a bind shows it")
            } else if t.guests.iter().any(|g| holds_bind(g)) || holds_bind(&t.host) {
                Some("a bind lies inside it")
            } else {
                None
            };
            if let Some(why) = why {
                shown.skipped.push((t.host.clone(), why.into()));
                continue;
            }
            for guest in &t.guests {
                args.two("--ro-bind", &t.host, guest);
                exec_from.push(guest.clone());
                shown.views.push(View {
                    host: t.host.clone(),
                    guest: guest.clone(),
                    writable: false,
                });
            }
        }
        for cache in &found.caches {
            // In a bound home, a cache the home's bind shows is overlaid on
            // the bind: its writes stay in the sandbox (the home allowlist).
            let on_bind = bound_home
                .filter(|h| cache.path.starts_with(h))
                .and_then(|_| {
                    views
                        .iter()
                        .filter(|v| v.guest_of(&cache.path).is_some())
                        .max_by_key(|v| depth(&v.guest))
                })
                .filter(|v| {
                    v.writable && v.guest == v.host && !holds_bind_below(views, &cache.path)
                });
            if on_bind.is_some() {
                exec_from.extend(cache.read_only.iter().cloned());
                shown.overlays.push(cache.clone());
                continue;
            }
            let why = if by_bind(&cache.path) {
                Some("a bind shows it")
            } else if holds_bind(&cache.path) {
                Some("a bind lies inside it")
            } else {
                None
            };
            if let Some(why) = why {
                shown.skipped.push((cache.path.clone(), why.into()));
                continue;
            }
            // A version manager's shims lie in its home, shown read-only
            // already: the overlay's lower layer is there (every bubblewrap
            // bind re-reads the mount table: one fewer).
            let in_home =
                cache.shims && shown.views.iter().any(|v| cache.path.starts_with(&v.guest));
            if !in_home {
                args.two("--ro-bind", &cache.path, &cache.path);
            }
            exec_from.extend(cache.read_only.iter().cloned());
            if cache.shims {
                exec_from.push(cache.path.clone());
            }
            shown.overlays.push(cache.clone());
        }
        if !shown.overlays.is_empty() {
            args.one("--dir", CACHES_STAGING);
        }
        shown
    }
}
