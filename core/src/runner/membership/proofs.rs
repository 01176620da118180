//! What each step of the cluster's connections proves, and over what: one function per
//! step, so that both ends of a step compute the same bytes (see [`super::secret`]).

use super::secret::{Nonce, Proof, Secret};

/// A member's proof in its [`super::wire::Frame::Hello`] (`join`: its `Join`), over the
/// coordinator's nonce, its own, and the place it claims.
pub fn hello(
    secret: &Secret,
    join: bool,
    (theirs, ours): (&Nonce, &Nonce),
    (process, processes): (u32, u32),
) -> Proof {
    let label = if join {
        "megaflux/join/1"
    } else {
        "megaflux/hello/1"
    };
    secret.prove(
        label,
        &[theirs, ours, &process.to_le_bytes(), &processes.to_le_bytes()],
    )
}

/// The coordinator's proof in its [`super::wire::Frame::Welcome`] to the member at
/// `process`, over the member's nonce and its own.
pub fn welcome(secret: &Secret, (member, coordinator): (&Nonce, &Nonce), process: u32) -> Proof {
    secret.prove(
        "megaflux/welcome/1",
        &[member, coordinator, &process.to_le_bytes()],
    )
}

/// A connecting process's proof on a timely connection of generation `generation`, from
/// `from` to `to` (computation ranks), over the listener's nonce and its own.
pub fn connect(
    secret: &Secret,
    (listener, connector): (&Nonce, &Nonce),
    generation: u32,
    (from, to): (u64, u64),
) -> Proof {
    secret.prove(
        "megaflux/mesh-connect/1",
        &[
            listener,
            connector,
            &generation.to_le_bytes(),
            &from.to_le_bytes(),
            &to.to_le_bytes(),
        ],
    )
}

/// The listening process's answer on that connection, over the connector's nonce and its
/// own.
pub fn accept(
    secret: &Secret,
    (connector, listener): (&Nonce, &Nonce),
    generation: u32,
    (from, to): (u64, u64),
) -> Proof {
    secret.prove(
        "megaflux/mesh-accept/1",
        &[
            connector,
            listener,
            &generation.to_le_bytes(),
            &from.to_le_bytes(),
            &to.to_le_bytes(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No step's proof is another step's: a proof seen on one cannot be replayed on another.
    #[test]
    fn each_step_proves_something_else() {
        let s = Secret::new("a cluster secret of some length").unwrap();
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let all = [
            hello(&s, false, (&a, &b), (1, 3)),
            hello(&s, true, (&a, &b), (1, 3)),
            hello(&s, false, (&a, &b), (2, 3)),
            welcome(&s, (&a, &b), 1),
            connect(&s, (&a, &b), 0, (1, 0)),
            accept(&s, (&a, &b), 0, (1, 0)),
            connect(&s, (&a, &b), 1, (1, 0)),
        ];
        for (i, p) in all.iter().enumerate() {
            for q in &all[i + 1..] {
                assert_ne!(p, q);
            }
        }
    }
}
