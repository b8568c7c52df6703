//! `cc-microvm-image`: builds the microvm guest image from Debian packages,
//! or verifies one. Logs go to stderr; `build` prints the image directory on
//! stdout so scripts can capture it.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use sandbox_microvm_image::build::{self, Options};
use sandbox_microvm_image::{current, error_chain, modules, verify};

#[derive(Parser)]
#[command(
    name = "cc-microvm-image",
    about = "Builds and verifies the microvm guest image"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Builds (or reuses) `OUT/<id>/` and points `OUT/current` at it.
    Build {
        /// The static guest agent, installed as /init.
        #[arg(long)]
        agent: PathBuf,
        /// The output directory.
        #[arg(long)]
        out: PathBuf,
        /// Where downloaded .debs are kept [default: OUT/.cache].
        #[arg(long)]
        cache: Option<PathBuf>,
        /// Extra module roots, added to the defaults (repeatable).
        #[arg(long = "module")]
        modules: Vec<String>,
        /// The agent's protocol version.
        #[arg(long, default_value_t = sandbox_microvm_proto::VERSION)]
        protocol: u32,
        /// Build even if an image from the same inputs exists.
        #[arg(long)]
        rebuild: bool,
        /// Remove the other images in OUT afterwards (not the package cache).
        #[arg(long)]
        prune: bool,
    },
    /// Re-hashes an image: an image directory, or an output dir's `current`.
    Verify {
        /// `OUT` or `OUT/<id>`.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let result: Result<(), Box<dyn std::error::Error>> = match Cli::parse().cmd {
        Cmd::Build {
            agent,
            out,
            cache,
            modules: extra,
            protocol,
            rebuild,
            prune,
        } => {
            let mut roots: Vec<String> = modules::DEFAULT_ROOTS
                .iter()
                .map(|s| s.to_string())
                .collect();
            roots.extend(extra);
            let opts = Options {
                agent,
                out,
                cache,
                roots,
                protocol,
                rebuild,
            };
            let started = Instant::now();
            let out_dir = opts.out.clone();
            build::build(&opts, &|line| eprintln!("cc-microvm-image: {line}")).and_then(|b| {
                if prune {
                    let removed = build::prune(&out_dir, &b.dir)?;
                    eprintln!("cc-microvm-image: removed {removed} other image(s)");
                }
                Ok(b)
            }).map(|b| {
                eprintln!(
                    "cc-microvm-image: {} {} in {:.1} s: vmlinux {} bytes, initrd {} bytes, {} modules",
                    if b.reused { "reused" } else { "built" },
                    b.dir.display(),
                    started.elapsed().as_secs_f64(),
                    b.manifest.vmlinux.bytes,
                    b.manifest.initrd.bytes,
                    b.manifest.modules.len(),
                );
                println!("{}", b.dir.display());
            })
            .map_err(Into::into)
        }
        Cmd::Verify { path } => {
            let dir = if path.join("manifest.json").is_file() {
                Some(path.clone())
            } else {
                current(&path)
            };
            match dir {
                None => Err(format!(
                    "{}: neither an image directory nor an output dir with a valid `current`; run `cc-microvm-image build`",
                    path.display()
                )
                .into()),
                Some(dir) => verify(&dir)
                    .map(|m| {
                        println!(
                            "{} ok: kernel {} {}, {} modules",
                            dir.display(),
                            m.kernel.package,
                            m.kernel.version,
                            m.modules.len()
                        );
                    })
                    .map_err(Into::into),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cc-microvm-image: error: {}", error_chain(&*e));
            ExitCode::FAILURE
        }
    }
}
