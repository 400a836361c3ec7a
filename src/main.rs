fn main() -> std::process::ExitCode {
    epdoctor::run(std::env::args_os())
}
