//! Carries a plugin's `tracing` events to the host.
//!
//! A cdylib has its own copy of tracing's statics, so events emitted in a
//! plugin never reach the host's subscriber (docs/research/plugin-abi.md §1.9).
//! `init` installs this small subscriber inside the plugin; it formats each
//! event and hands it to the host's `log` callback. Spans are not carried.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use abi_stable::std_types::{RResult, RStr};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Metadata, Subscriber};

use crate::abi::HostServicesBox;

static HOST: OnceLock<HostServicesBox> = OnceLock::new();

/// The host method that answers the most verbose level it wants.
pub(crate) const MAX_LEVEL_METHOD: &str = "log.maxLevel";

/// Keeps the host's services and routes this library's tracing to them.
pub(crate) fn install(host: HostServicesBox) {
    let max = match host.call(RStr::from_str(MAX_LEVEL_METHOD), RStr::from_str("")) {
        RResult::ROk(level) => level.as_str().parse().unwrap_or(LevelFilter::INFO),
        RResult::RErr(_) => LevelFilter::INFO,
    };
    if HOST.set(host).is_ok() {
        // Fails only if the plugin installed its own subscriber; keep theirs.
        let _ = tracing::subscriber::set_global_default(Bridge {
            max,
            next_span: AtomicU64::new(1),
        });
        // This library's own panic hook (each cdylib has its own std). Every
        // panic in backend code is caught by the SDK and reported as a
        // PANICKED error; the default hook would also dump it on the
        // server's stderr. One debug line is enough.
        std::panic::set_hook(Box::new(|info| {
            let Some(host) = HOST.get() else { return };
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            host.log(
                level_number(Level::DEBUG),
                RStr::from_str("panic"),
                RStr::from_str(&format!("panicked{location}: {message}")),
            );
        }));
    }
}

/// 1 = error … 5 = trace, the numbering of `HostServices::log`.
pub(crate) fn level_number(level: Level) -> u8 {
    match level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

struct Bridge {
    max: LevelFilter,
    next_span: AtomicU64,
}

impl Subscriber for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let Some(host) = HOST.get() else { return };
        let mut text = Fields::default();
        event.record(&mut text);
        let meta = event.metadata();
        host.log(
            level_number(*meta.level()),
            RStr::from_str(meta.target()),
            RStr::from_str(&text.finish()),
        );
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// `message key=value key=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Fields {
    fn finish(self) -> String {
        if self.rest.is_empty() {
            self.message
        } else {
            format!("{}{}", self.message, self.rest)
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }
}
