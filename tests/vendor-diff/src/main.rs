//! `vendor-diff [--seed N] [--cases N] [--deviations FILE]`: the
//! differential run (normally started by `cargo xtask vendor-diff`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = vendor_diff::Opts { seed: 0x1a2b_3c4d, cases: 2000 };
    let mut devs = concat!(env!("CARGO_MANIFEST_DIR"), "/deviations.toml").to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let val = it.next();
        let num = |v: Option<&String>| -> Option<u64> {
            let v = v?;
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            }
        };
        match a.as_str() {
            "--seed" => match num(val) {
                Some(s) => opts.seed = s,
                None => return usage(),
            },
            "--cases" => match num(val) {
                Some(n) => opts.cases = n,
                None => return usage(),
            },
            "--deviations" => match val {
                Some(p) => devs = p.clone(),
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    match vendor_diff::main_with(opts, &devs) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vendor-diff: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: vendor-diff [--seed N] [--cases N] [--deviations FILE]");
    ExitCode::FAILURE
}
