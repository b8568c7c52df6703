//! One module per subcommand.

pub mod ask;
pub mod conversation;
pub mod mcp;
pub mod policy;
pub mod probe;
pub mod run;
pub mod sandboxd;
pub mod serve;
pub mod workspace;
