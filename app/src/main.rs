//! The `kostant` binary. With a subcommand it runs that job; with none it starts the terminal
//! chat (the windowed app arrives with the Slint UI).
#![forbid(unsafe_code)]

mod cli;
mod history;
mod model_path;

use clap::Parser;

use cli::{Cli, Command};

fn main() {
    // The privacy promise, enforced before anything else runs: no thread exists yet (the kernel
    // pool starts with the model), so nothing could have opened a socket. Where the OS offers
    // the switch and it fails, stop rather than run with the network open.
    if let Err(e) = kostant_platform::netguard::deny_network() {
        eprintln!("kostant: refusing to start without the network denied: {e}");
        std::process::exit(1);
    }
    let result = match Cli::parse().command {
        Some(Command::Chat(args)) => cli::chat::run(args),
        Some(Command::Bench(args)) => cli::bench::run(args),
        Some(Command::History(args)) => cli::history::run(args),
        Some(Command::Doctor(args)) => cli::doctor::run(args),
        Some(Command::Synth(args)) => cli::synth::run(args),
        None => cli::chat::run(cli::ChatArgs::parse_from(["kostant"])),
    };
    if let Err(e) = result {
        eprintln!("kostant: {e:#}");
        std::process::exit(1);
    }
}
