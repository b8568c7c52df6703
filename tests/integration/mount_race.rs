//! A mount is checked and made as one object (SPEC G5; threat model T40):
//! black-box, the real `cc_server run --backend bwrap` launched again and
//! again on a bind whose directory another thread keeps swapping with a
//! symlink to the server's state directory — which no bind may show, so a
//! launch that checked the directory and then mounted the symlink's target
//! would show it. Each launch either shows the directory or is refused;
//! none ever shows what the symlink leads to. As the account running the
//! tests and as the unprivileged `cc-test`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::allowlists::{Account, accounts, chown_tree, owned_dir, program_for};
use crate::util::*;

/// What the state directory holds: a launch that prints it has shown it.
const STATE_MARK: &str = "state-dir-content-7c1e";
/// What the bound directory holds.
const OWN_MARK: &str = "own-dir-content-42";

/// `renameat2(RENAME_EXCHANGE)`: `a` and `b` trade places atomically.
fn exchange(a: &CString, b: &CString) -> bool {
    // SAFETY: two NUL-terminated paths alive for the call.
    unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        ) == 0
    }
}

fn c(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// `cc_server run --backend bwrap --bind BIND -- ARGV…` as `account`, the
/// server's state directory in `state_home`.
fn launch(
    plugins: &Plugins,
    account: &Account,
    cwd: &Path,
    state_home: &Path,
    bind: &Path,
    argv: &[&str],
) -> std::process::Output {
    let mut server =
        CcServer::with_program(plugins, &program_for(account)).config(SANDBOX_LAYER_ONLY);
    if !account.invoking {
        server = server.run_as(account.uid, account.gid);
    }
    server
        .env("XDG_STATE_HOME", state_home)
        .current_dir(cwd)
        .args(["run", "--backend", "bwrap", "--bind"])
        .arg(bind)
        .arg("--")
        .args(argv)
        .output()
}

#[test]
fn a_bind_swapped_for_a_symlink_between_check_and_mount_never_shows_its_target() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        race_as(&plugins, &account);
    }
}

fn race_as(plugins: &Plugins, account: &Account) {
    let dir = owned_dir(account);
    let top = std::fs::canonicalize(dir.path()).unwrap();
    // The server's state directory (`XDG_STATE_HOME`), outside its home so
    // no mask hides it: only the bind rules keep it out of sandboxes.
    let state_home = top.join("state");
    let state = state_home.join("cc_server");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("mark"), STATE_MARK).unwrap();
    let work = top.join("work");
    let sub = work.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("mark"), OWN_MARK).unwrap();
    let decoy = work.join("decoy");
    std::os::unix::fs::symlink(&state, &decoy).unwrap();
    // Where `run` starts (its workdir, bound too): apart from both.
    let cwd = top.join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    chown_tree(account, &top);

    // A bind named through the symlink while it is in place is refused by
    // the bind rules: the race below is the only way the target could show.
    let mark = decoy.join("mark");
    let direct = launch(
        plugins,
        account,
        &cwd,
        &state_home,
        &decoy,
        &["/bin/cat", mark.to_str().unwrap()],
    );
    assert_ne!(code(&direct), 0, "{account:?}: {}", both(&direct));
    assert!(
        !text(&direct.stdout).contains(STATE_MARK),
        "{}",
        both(&direct)
    );
    assert!(
        text(&direct.stderr).contains("the server's"),
        "{account:?}: {}",
        both(&direct)
    );

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        let (a, b) = (c(&sub), c(&decoy));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if exchange(&a, &b) {
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let script = format!("cat {0}/mark {0}/*/mark 2>/dev/null; exit 0", sub.display());
    let (mut shown, mut changed, mut by_rule, mut other) = (0, 0, 0, 0);
    let mut other_said = String::new();
    for _ in 0..30 {
        let out = launch(
            plugins,
            account,
            &cwd,
            &state_home,
            &sub,
            &["/bin/sh", "-c", &script],
        );
        let said = text(&out.stdout);
        assert!(
            !said.contains(STATE_MARK),
            "{account:?}: a launch showed the state directory through the swapped bind\n{}",
            both(&out)
        );
        let err = text(&out.stderr);
        if code(&out) == 0 && said.contains(OWN_MARK) {
            shown += 1;
        } else if err.contains("checked and made as one object") {
            changed += 1;
        } else if err.contains("the server's") {
            by_rule += 1;
        } else {
            other += 1;
            other_said = err.lines().last().unwrap_or("").to_owned();
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    // Put things back where they were for the last look.
    if std::fs::symlink_metadata(&sub)
        .unwrap()
        .file_type()
        .is_symlink()
    {
        assert!(exchange(&c(&sub), &c(&decoy)));
    }
    eprintln!(
        "{account:?}: {shown} launches showed the directory; refused: {changed} as changed since \
         the check, {by_rule} by the bind rules, {other} otherwise (last: {other_said:?}); over {} \
         swaps",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > 0);
    assert_eq!(std::fs::read_to_string(sub.join("mark")).unwrap(), OWN_MARK);
}
