//! One module per subcommand.

pub mod agent;
pub mod ask;
pub mod conversation;
pub mod hook;
pub mod mcp;
pub mod policy;
pub mod probe;
pub mod run;
pub mod sandboxd;
pub mod serve;
pub mod workspace;
