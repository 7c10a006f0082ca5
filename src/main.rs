#![forbid(unsafe_code)]

fn main() {
    println!("svm-apiserver: not wired yet");
}
