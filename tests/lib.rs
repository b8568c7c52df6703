//! Nothing here: the tests live in `integration/`.
