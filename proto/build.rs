//! Compiles the wire schema (the single source of truth) into Rust with capnpc.
//! Needs the `capnp` compiler (Debian: `capnproto`); the README's commands install it.

fn main() {
    println!("cargo:rerun-if-changed=schema/controller.capnp");
    capnpc::CompilerCommand::new()
        .src_prefix("schema")
        .file("schema/controller.capnp")
        // The generated module lives at crate::wire::controller_capnp.
        .default_parent_module(vec!["wire".into()])
        .run()
        .expect("compiling schema/controller.capnp (is the `capnp` tool installed? apt-get install capnproto)");
}
