//! The `kostant` binary. With a subcommand it runs that job; with none it starts the terminal
//! chat (the windowed app arrives with the Slint UI).
#![forbid(unsafe_code)]

mod cli;
mod history;
mod model_path;

use clap::Parser;

use cli::{Cli, Command};

fn main() {
    let result = match Cli::parse().command {
        Some(Command::Chat(args)) => cli::chat::run(args),
        Some(Command::Bench(args)) => cli::bench::run(args),
        Some(Command::History(args)) => cli::history::run(args),
        None => cli::chat::run(cli::ChatArgs::parse_from(["kostant"])),
    };
    if let Err(e) = result {
        eprintln!("kostant: {e:#}");
        std::process::exit(1);
    }
}
