//! `vendor-diff [--seed N] [--cases N] [--deviations FILE]`: the
//! differential run (normally started by `cargo xtask vendor-diff`).
//! `--write-vectors DIR` writes conformance vector files from the vendor
//! code instead, `--rederive DIR` re-derives the published ones in DIR
//! (`src/regen`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = vendor_diff::Opts { seed: 0x1a2b_3c4d, cases: 2000 };
    let mut devs = concat!(env!("CARGO_MANIFEST_DIR"), "/deviations.toml").to_string();
    let mut regen: Option<(bool, String)> = None;
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
            "--write-vectors" | "--rederive" => match val {
                Some(d) => regen = Some((a == "--write-vectors", d.clone())),
                None => return usage(),
            },
            "--deviations" => match val {
                Some(p) => devs = p.clone(),
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    if let Some((write, dir)) = regen {
        return regen_main(write, &dir, opts);
    }
    match vendor_diff::main_with(opts, &devs) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vendor-diff: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(vendor_c)]
fn regen_main(write: bool, dir: &str, opts: vendor_diff::Opts) -> ExitCode {
    let dir = std::path::Path::new(dir);
    let r = if write {
        vendor_diff::regen::write_vectors(dir, opts.seed, opts.cases).map(|l| (l, true))
    } else {
        vendor_diff::regen::rederive(dir)
    };
    match r {
        Ok((lines, ok)) => {
            lines.iter().for_each(|l| println!("{l}"));
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("vendor-diff: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(vendor_c))]
fn regen_main(_write: bool, _dir: &str, _opts: vendor_diff::Opts) -> ExitCode {
    eprintln!(
        "vendor-diff: the vendor sources were not compiled in (run `cargo xtask vendor-diff`)"
    );
    ExitCode::FAILURE
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: vendor-diff [--seed N] [--cases N] [--deviations FILE] [--write-vectors DIR | --rederive DIR]"
    );
    ExitCode::FAILURE
}
