//! libsode.so's soname: installed as libsode.so.0.x.y (capi/CMakeLists.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsode.so.0");
}
