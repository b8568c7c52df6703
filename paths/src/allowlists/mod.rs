//! What may change where the host keeps code (SPEC G5; docs/threat-model.md
//! §4): allowlists, not lists of dangerous names.
//!
//! The host keeps code in more places than any list of names could hold: a
//! language runtime's user site directory, what a version manager's rc file
//! sources, a file a config includes, the configs of every tool, editor and
//! agent, and secret directories that do not exist yet. So where a writable
//! bind shows such a place, the rule says what *may* change, and everything
//! else is refused:
//!
//! - [`home`] — in a user's home, everything under a dot-path (and the few
//!   other places tools keep code) is read-only but a short list of data;
//! - [`git`] — in a git directory that existed at launch, only what git
//!   writes in ordinary work (objects, refs, logs, the index, `HEAD`, …).
//!
//! Both are judged on canonical paths by [`crate::write_rules::Rules`], so
//! the Linux create-time guard and the jail of the in-server file tools
//! refuse the same things, by the same rule names; the bwrap plan keeps what
//! exists read-only by mounts as well, and the seatbelt profile follows them
//! where a profile can.

pub mod git;
pub mod home;
