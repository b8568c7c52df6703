//! One module per subcommand.

pub mod probe;
pub mod run;
pub mod serve;
