//! Links the addon against Node's symbols (resolved at load time).

fn main() {
    napi_build::setup();
}
