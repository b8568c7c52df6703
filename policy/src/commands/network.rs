//! Network tools (curl, ssh, cloud CLIs, …) and the network forms of `rsync`
//! and `openssl`.

use super::Cmd;
use super::options::is_remote_spec;
use crate::Class::*;
use crate::walk::Walker;

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "curl" | "wget" | "nc" | "ncat" | "netcat" | "socat" | "telnet" | "ssh" | "scp"
        | "sftp" | "ftp" | "lftp" | "tftp" | "http" | "https" | "xh" | "xhs" | "aria2c"
        | "axel" | "ping" | "ping6" | "dig" | "nslookup" | "host" | "traceroute" | "tracepath"
        | "mtr" | "mosh" | "websocat" | "nmap" | "whois" | "ssh-keyscan" | "rclone"
        | "smbclient" | "ldapsearch" | "mysql" | "psql" | "redis-cli" | "mongo" | "mongosh"
        | "grpcurl" | "aws" | "gcloud" | "gsutil" | "az" | "doctl" | "flyctl" | "vercel"
        | "netlify" | "wrangler" | "heroku" => w.found(AccessNetwork, c.args, "network tool"),
        "rsync" => {
            let remote = c.args.iter().skip(1).any(|a| {
                let t = a.text.as_str();
                !t.starts_with('-') && (t.starts_with("rsync://") || is_remote_spec(t))
            });
            if remote {
                w.found(AccessNetwork, c.args, "copies to or from a remote host");
            } else {
                w.found(Other, c.args, "copies files");
            }
        }
        "openssl" => {
            if matches!(c.text(1), Some("s_client" | "s_time")) {
                w.found(AccessNetwork, c.args, "opens a TLS connection");
            } else {
                w.found(Other, c.args, "openssl");
            }
        }
        _ => return false,
    }
    true
}
