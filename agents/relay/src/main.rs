fn main() {
    eprintln!("hwqos-relay: not implemented yet");
    std::process::exit(1);
}
