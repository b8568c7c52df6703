//! The page and what it loads, embedded in the binary: no file is read at
//! run time and nothing comes from a CDN. The page's own HTML, script and
//! style are hand-written (`console/page/`); xterm.js and its fit addon are
//! the npm packages pinned in `console/assets/package-lock.json` (the build
//! script names the install command when they are missing).

/// One file the console serves.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The name under `/console/`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

macro_rules! installed {
    ($path:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/assets/node_modules/",
            $path
        ))
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The page itself, served at `/`.
pub const PAGE: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../page/index.html"),
};

/// Everything the page loads, each at `/console/{name}`.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_bytes!("../page/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: CSS,
        body: include_bytes!("../page/app.css"),
    },
    Asset {
        name: "xterm.js",
        content_type: JS,
        body: installed!("@xterm/xterm/lib/xterm.js"),
    },
    Asset {
        name: "xterm.css",
        content_type: CSS,
        body: installed!("@xterm/xterm/css/xterm.css"),
    },
    Asset {
        name: "addon-fit.js",
        content_type: JS,
        body: installed!("@xterm/addon-fit/lib/addon-fit.js"),
    },
];

/// The asset named `name`, if the console has it.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_embedded_files_and_has_no_inline_script() {
        let page = std::str::from_utf8(PAGE.body).unwrap();
        for src in page
            .split("src=\"")
            .skip(1)
            .chain(page.split("href=\"").skip(1))
        {
            let target = src.split('"').next().unwrap();
            let name = target
                .strip_prefix("/console/")
                .unwrap_or_else(|| panic!("{target}"));
            assert!(find(name).is_some(), "{target} is not embedded");
        }
        assert!(!page.contains("<script>"), "an inline script");
        let handler = page.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(handler.is_none(), "an inline handler: on{handler:?}");
        assert!(find("xterm.js").unwrap().body.len() > 100_000);
        assert!(find("../Cargo.toml").is_none());
    }
}
