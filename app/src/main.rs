//! The `kostant` binary. With a subcommand it runs that job; with none it opens the app when a
//! display is available and the window opens, and the terminal chat otherwise.
#![forbid(unsafe_code)]

mod cli;
mod model_path;

// The history lives in the library (the phone builds share it); `crate::history` stays its path.
use kostant_app::history;

use clap::{Args, CommandFactory, FromArgMatches, Parser};

use cli::{Cli, Command};

/// `kostant app`: the windowed app (the default when there is a display).
#[derive(Args, Debug, Default)]
struct AppArgs {
    /// GGUF model to run (default: the one scripts/setup.sh installs).
    #[arg(long, env = "KOSTANT_MODEL")]
    model: Option<std::path::PathBuf>,
    /// Where the history lives.
    ///
    /// Default: $XDG_DATA_HOME/kostant or ~/.local/share/kostant.
    #[arg(long, env = "KOSTANT_DATA_DIR")]
    data_dir: Option<std::path::PathBuf>,
    /// Do not save chats to the encrypted history.
    #[arg(long)]
    no_history: bool,
    /// The phone layout (390x844) in a desktop window.
    #[arg(long)]
    phone: bool,
    /// The dark theme.
    #[arg(long)]
    dark: bool,
}

/// Only to read `AppArgs` from the environment when `kostant` runs with no arguments.
#[derive(Parser)]
struct AppDefaults {
    #[command(flatten)]
    args: AppArgs,
}

fn main() {
    // The privacy promise, enforced before anything else runs: no thread exists yet (the kernel
    // pool starts with the model), so nothing could have opened a socket. Where the OS offers
    // the switch and it fails, stop rather than run with the network open.
    if let Err(e) = kostant_platform::netguard::deny_network() {
        eprintln!("kostant: refusing to start without the network denied: {e}");
        std::process::exit(1);
    }
    let app_cmd = AppArgs::augment_args(
        clap::Command::new("app")
            .about("Open the app window (the default with a display; terminal chat without)."),
    );
    let matches = Cli::command().subcommand(app_cmd).get_matches();
    let result = match matches.subcommand() {
        Some(("app", m)) => open_app(
            AppArgs::from_arg_matches(m).unwrap_or_else(|e| e.exit()),
            true,
        ),
        _ => match Cli::from_arg_matches(&matches)
            .unwrap_or_else(|e| e.exit())
            .command
        {
            Some(c) => run(c),
            None => {
                let display = ["DISPLAY", "WAYLAND_DISPLAY"]
                    .iter()
                    .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
                if display {
                    open_app(AppDefaults::parse_from(["kostant"]).args, false)
                } else {
                    cli::chat::run(cli::ChatArgs::parse_from(["kostant"]))
                }
            }
        },
    };
    if let Err(e) = result {
        eprintln!("kostant: {e:#}");
        std::process::exit(1);
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Chat(args) => cli::chat::run(args),
        Command::Complete(args) => cli::complete::run(args),
        Command::Models(args) => cli::models::run(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::History(args) => cli::history::run(args),
        Command::Docs(args) => cli::docs::run(args),
        Command::Doctor(args) => cli::doctor::run(args),
        Command::Synth(args) => cli::synth::run(args),
        Command::Guard(args) => cli::guard::run(args),
        Command::Eval(args) => cli::eval::run(args),
        Command::Quantize(args) => cli::quantize::run(args),
        Command::Adapter(args) => cli::adapter::run(args),
    }
}

/// Opens the app window. Without one (`forced` false), falls back to the terminal chat.
fn open_app(args: AppArgs, forced: bool) -> anyhow::Result<()> {
    let model = model_path::resolve(args.model.as_deref()).map_err(|e| format!("{e:#}"));
    let mut cfg = kostant_app::ui::AppConfig::new(model);
    cfg.data_dir = args.data_dir;
    cfg.history = !args.no_history;
    cfg.dark = args.dark;
    match kostant_app::ui::run_window(cfg, args.phone)? {
        kostant_app::ui::Launch::Closed => Ok(()),
        kostant_app::ui::Launch::NoWindow(why) if forced => {
            anyhow::bail!("cannot open the app window: {why}")
        }
        kostant_app::ui::Launch::NoWindow(why) => {
            eprintln!("kostant: no app window ({why}); starting the terminal chat");
            cli::chat::run(cli::ChatArgs::parse_from(["kostant"]))
        }
    }
}
