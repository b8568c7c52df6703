//! Log output. The server logs with timestamps; the one-shot commands
//! (`run`, `probe`) print short `cc_server: …` lines, because their stderr is
//! shared with the command's own.

use std::fmt;

use tracing::level_filters::LevelFilter;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;

/// The environment variable that sets the log level (`error` … `trace`).
pub const LOG_ENV: &str = "CC_SERVER_LOG";

pub fn init(server: bool) {
    let default = if server {
        LevelFilter::INFO
    } else {
        LevelFilter::WARN
    };
    let level = std::env::var(LOG_ENV)
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(default);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if server {
        builder.with_target(false).try_init()
    } else {
        builder.event_format(Short).try_init()
    };
}

/// `cc_server: warning: message key=value`.
struct Short;

impl<S, N> FormatEvent<S, N> for Short
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        write!(writer, "cc_server: {level}")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
