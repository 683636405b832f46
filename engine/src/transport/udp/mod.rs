//! UDP loops: send, receive, request/response.

pub mod recv;
pub mod rr;
pub mod send;
#[cfg(test)]
mod tests;
