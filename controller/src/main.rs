fn main() {
    eprintln!("xce-controller: not built yet");
    std::process::exit(2);
}
