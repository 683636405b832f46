//! Data flows joining their session: a flow is handed to the session whose cookie it
//! presents only from the session's address (unless `--flows-from-any-address`) and, for an
//! authenticated session, with a tag that proves the session key on this very connection.

use super::{Conn, ReceiverState};
use crate::session::auth;
use crate::session::control::{self, DATA_HELLO_LEN};

/// What a data flow's greeting carries after its cookie and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Greeting {
    /// Nothing (`UBD1`): a session without a key.
    Plain,
    /// A tag over the cookie and index (`UBD2`): a session with a key whose flows may come
    /// from any address (`--flows-from-any-address`).
    Tagged,
    /// A tag over the cookie, the index and the connection's ends (`UBD3`).
    Bound,
}

/// Hands a data flow to the session whose cookie it presents, if it comes from the session's
/// address and its tag (for an authenticated session) proves it holds the session key on
/// this very connection.
pub(super) fn join_flow(shared: &ReceiverState, conn: Conn, greeting: Greeting) {
    let rest: [u8; DATA_HELLO_LEN - 4] = conn.buf[4..DATA_HELLO_LEN].try_into().unwrap_or([0; DATA_HELLO_LEN - 4]);
    let (cookie, flow) = control::parse_data_hello(&rest);
    let entry = shared.pending.lock().unwrap_or_else(|p| p.into_inner()).get(&cookie).cloned();
    let Some(awaited) = entry else {
        return shared.drop_conn(conn.peer, "data flow for an unknown session");
    };
    let any_address = shared.cfg.flows_from_any_address;
    if !any_address && conn.peer.ip().to_canonical() != awaited.peer {
        let reason = format!(
            "data flow for the session of {} from another address (a NAT between? recv --flows-from-any-address)",
            awaited.peer
        );
        return shared.drop_conn(conn.peer, reason);
    }
    let tag = &conn.buf[DATA_HELLO_LEN..];
    let proven = match (&awaited.key, greeting) {
        (None, Greeting::Plain) => Ok(()),
        (None, _) => Err("tagged data flow for an unauthenticated session"),
        (Some(key), Greeting::Bound) if !any_address => match auth::FlowEnds::of(&conn.stream, false) {
            Ok(ends) if key.verify_bound_flow(&cookie, flow, &ends, tag) => Ok(()),
            _ => Err("data flow whose tag is not the session key's on this connection (--psk-file)"),
        },
        (Some(key), Greeting::Tagged) if any_address && key.verify_flow(&cookie, flow, tag) => Ok(()),
        (Some(_), Greeting::Tagged) if !any_address => {
            Err("data flow without the session's key bound to its connection (UBD2, an older sender: upgrade it)")
        }
        (Some(_), _) => Err("data flow without the session's key (--psk-file)"),
    };
    if let Err(reason) = proven {
        return shared.drop_conn(conn.peer, reason);
    }
    if conn.stream.set_nonblocking(false).is_ok() {
        let _ = awaited.to.send((flow, conn.stream));
    }
}
