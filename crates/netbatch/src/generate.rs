//! `netbatch generate man|completions DIR` (hidden): the man pages and the shell
//! completions, made from the command line's own definition so that they cannot fall
//! behind it. The package build (`scripts/package`) runs it.
//!
//! Man pages: `netbatch.1` and one page per command (`netbatch-run.1`, ...), as
//! `clap_mangen` renders each command's help. Completions: bash
//! (`netbatch`), zsh (`_netbatch`) and fish (`netbatch.fish`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::CommandFactory;

/// Arguments of `netbatch generate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// man or completions.
    #[arg(value_parser = ["man", "completions"])]
    what: String,
    /// The directory to write into (made if missing).
    dir: PathBuf,
}

pub(crate) fn main(a: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let written = match a.what.as_str() {
        "man" => man(&a.dir)?,
        _ => completions(&a.dir)?,
    };
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

/// The command line's definition, built as `netbatch` parses it.
fn command() -> clap::Command {
    let mut c = crate::Cli::command();
    c.build();
    c
}

/// Writes `netbatch.1` and a page per visible command.
fn man(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let top = command();
    let mut pages = vec![("netbatch".to_string(), top.clone())];
    // clap's own `help` command has no page: `netbatch help X` is `netbatch X --help`.
    for sub in top
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("netbatch-{}", sub.get_name());
        let cmd = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("netbatch {}", sub.get_name()));
        pages.push((name, cmd));
    }
    for (name, cmd) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd)
            .title(name.clone())
            .render(&mut buf)
            .with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}

/// Writes the bash, zsh and fish completions.
fn completions(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = command();
        let path = clap_complete::generate_to(shell, &mut cmd, "netbatch", dir)
            .with_context(|| format!("writing {shell} completions"))?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages are roff with the command's name and its options (from the same
    /// definition the parser uses), one per visible command, none for hidden ones; the
    /// completions name the commands.
    #[test]
    fn man_pages_and_completions_come_from_the_command_line() {
        let dir = tempfile::Builder::new()
            .prefix("netbatch-generate-")
            .tempdir()
            .unwrap();
        let pages = man(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "netbatch.1",
            "netbatch-run.1",
            "netbatch-check-config.1",
            "netbatch-lab.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert!(
            !names
                .iter()
                .any(|n| n.contains("generate") || n.contains("help")),
            "{names:?}"
        );
        let top = std::fs::read_to_string(dir.path().join("netbatch.1")).unwrap();
        assert!(
            top.starts_with(".ie \\n(.g .ds Aq \\(aq") || top.contains(".TH netbatch 1"),
            "{top}"
        );
        assert!(top.contains("\\-\\-log\\-format"), "{top}");
        let check = std::fs::read_to_string(dir.path().join("netbatch-check-config.1")).unwrap();
        assert!(check.contains(".TH netbatch-check-config 1"), "{check}");
        assert!(check.contains("\\-\\-offline"), "{check}");
        let done = completions(dir.path()).unwrap();
        assert_eq!(done.len(), 3);
        let bash = std::fs::read_to_string(dir.path().join("netbatch.bash")).unwrap();
        assert!(
            bash.contains("check-config") && bash.contains("lab"),
            "bash completions"
        );
    }
}
