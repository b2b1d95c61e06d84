//! The `sessiontree` command line. Only this file prints or exits; all the
//! work is in the library and in `cli/`.

mod cli;

fn main() {
    let code = cli::run();
    std::process::exit(code);
}
