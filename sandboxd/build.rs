//! Generates the ProcessService server and its messages from
//! `proto/process/v1/process.proto` with the system's `protoc` (Debian's
//! `protobuf-compiler`, installed by `.ci/install-deps`): no crate that
//! builds or vendors protoc, and no client code.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_protos(&["proto/process/v1/process.proto"], &["proto"])?;
    Ok(())
}
