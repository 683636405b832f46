//! iperf3's RSA authentication, both roles. A client (`send --iperf3 --username`) encrypts its
//! credentials ([`Credentials`]) with the server's public key and sends them, base64, as the
//! parameters' `authtoken`; a server (`recv --iperf3 --rsa-private-key-path`) decrypts them,
//! holds their time against its clock and the password against its authorized-users file, lets
//! each token in once, and refuses anything else with iperf3's "test authorization failed"
//! (error 142).
//!
//! Padding: iperf3 up to 3.16 uses PKCS#1 v1.5; from 3.17 OAEP (OpenSSL's default, SHA-1) unless
//! run with `--use-pkcs1-padding`. Our server takes either (a text that decrypts under one
//! padding does not under the other), our client sends what [`RsaPadding`] says.
//!
//! The keys and the users file are read once, at start: a bad one is a usage error naming the
//! file, before anything listens or connects.

use crate::base::error::{Error, Result};
use crate::wire::iperf3::auth::{check_credential, AuthorizedUsers, Credentials, MAX_USERS_FILE_LEN};
use crate::wire::iperf3::{error_code, Refusal, MAX_AUTHTOKEN_LEN};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::rand_core::OsRng;
use rsa::traits::PublicKeyParts;
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey, RsaPublicKey};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// iperf3's default `--time-skew-threshold`: a token more than this many seconds from the
/// server's clock is refused.
pub const DEFAULT_SKEW_SECONDS: u64 = 10;
/// Longest key file read.
const MAX_KEY_FILE_LEN: u64 = 64 * 1024;
/// What each padding takes of an RSA block: PKCS#1 v1.5's 11 bytes, OAEP with SHA-1's 42.
const PKCS1_OVERHEAD: usize = 11;
const OAEP_SHA1_OVERHEAD: usize = 2 * 20 + 2;

/// The padding a client encrypts its credentials with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RsaPadding {
    /// PKCS#1 v1.5: what iperf3 servers up to 3.16 read, and 3.17+ with `--use-pkcs1-padding`.
    #[default]
    Pkcs1,
    /// OAEP with SHA-1 (OpenSSL's default): what a 3.17+ server reads by default.
    Oaep,
}

/// The Unix time now, in seconds (as iperf3 stamps and checks its tokens).
pub fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A usage error about the file `option` names.
fn file_error(option: &str, path: &Path, why: impl std::fmt::Display) -> Error {
    Error::usage(format!("{option} {}: {why}", path.display()))
}

/// The text of the file `option` names, at most `max` bytes.
fn read_text(option: &str, path: &Path, max: u64) -> Result<String> {
    let len = std::fs::metadata(path).map_err(|e| file_error(option, path, format!("cannot read it: {e}")))?.len();
    if len > max {
        return Err(file_error(option, path, format!("{len} bytes, more than such a file holds (at most {max})")));
    }
    std::fs::read_to_string(path).map_err(|e| file_error(option, path, format!("cannot read it: {e}")))
}

/// A key file's text, bounded; `option` names it in errors.
fn read_key_file(option: &str, path: &Path) -> Result<String> {
    let text = read_text(option, path, MAX_KEY_FILE_LEN)?;
    if text.contains("ENCRYPTED") {
        let why = "the key is protected by a passphrase: write it out without one (openssl rsa -in KEY -out PLAIN.pem)";
        return Err(file_error(option, path, why));
    }
    Ok(text)
}

/// `recv --iperf3`'s side: the private key, the users it lets in, and how far a token's time
/// may be from our clock.
pub struct ServerAuth {
    key: RsaPrivateKey,
    users: AuthorizedUsers,
    skew_seconds: u64,
    used: UsedTokens,
}

/// Most tokens remembered at once (each for at most twice the skew threshold).
const MAX_USED_TOKENS: usize = 4096;

/// The tokens already let in, each kept while its time is within the skew threshold: a token
/// seen on the wire cannot start a second test (a stock iperf3 server would take it again).
/// A client makes a new one for every test (the padding is random), so none is refused twice.
#[derive(Default)]
struct UsedTokens(Mutex<VecDeque<([u8; 32], i64)>>);

impl UsedTokens {
    /// Records the encrypted token `sealed`, valid until Unix time `until`; false when it was
    /// let in before.
    fn first_use(&self, sealed: &[u8], until: i64, now: i64) -> bool {
        let id: [u8; 32] = Sha256::digest(sealed).into();
        let mut used = self.0.lock().unwrap_or_else(|p| p.into_inner());
        used.retain(|(_, valid_until)| *valid_until >= now);
        if used.iter().any(|(seen, _)| *seen == id) {
            return false;
        }
        if used.len() >= MAX_USED_TOKENS {
            used.pop_front();
        }
        used.push_back((id, until));
        true
    }
}

impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ServerAuth({}-bit key, {} users, skew {} s)",
            self.key.size() * 8,
            self.users.len(),
            self.skew_seconds
        )
    }
}

impl ServerAuth {
    /// Reads `--rsa-private-key-path` (PEM: PKCS#8 `BEGIN PRIVATE KEY` or PKCS#1 `BEGIN RSA
    /// PRIVATE KEY`) and `--authorized-users-path`; `skew_seconds` is `--time-skew-threshold`.
    pub fn load(private_key: &Path, users: &Path, skew_seconds: u64) -> Result<ServerAuth> {
        const KEY: &str = "--rsa-private-key-path";
        let text = read_key_file(KEY, private_key)?;
        let key = private_key_of(text.trim()).map_err(|why| file_error(KEY, private_key, why))?;
        const USERS: &str = "--authorized-users-path";
        let text = read_text(USERS, users, MAX_USERS_FILE_LEN as u64)?;
        let users = AuthorizedUsers::parse(&text).map_err(|why| file_error(USERS, users, why))?;
        if skew_seconds == 0 {
            return Err(Error::usage("--time-skew-threshold must be at least 1 second (iperf3's default is 10)"));
        }
        Ok(ServerAuth { key, users, skew_seconds, used: UsedTokens::default() })
    }

    /// How many users the file lets in.
    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// Checks a client's `authtoken` at Unix time `now`: the user it let in, or a refusal
    /// with iperf3's error 142 and our reason (for our log only: the client learns nothing
    /// but "test authorization failed", whatever failed).
    pub fn check(&self, token: Option<&str>, now: i64) -> std::result::Result<String, Refusal> {
        let refuse = |why: String| Refusal::new(error_code::AUTH, format!("authorization failed: {why}"));
        let token = token.ok_or_else(|| refuse("the client sent no credentials (iperf3 -c --username)".into()))?;
        if token.len() > MAX_AUTHTOKEN_LEN {
            return Err(refuse(format!("a token of {} bytes", token.len())));
        }
        let sealed = BASE64.decode(token).map_err(|_| refuse("the token is not base64".into()))?;
        if sealed.len() != self.key.size() {
            return Err(refuse(format!(
                "a token of {} bytes, not the {} of this {}-bit key (made with another key?)",
                sealed.len(),
                self.key.size(),
                self.key.size() * 8
            )));
        }
        let text = self
            .key
            .decrypt_blinded(&mut OsRng, Pkcs1v15Encrypt, &sealed)
            .or_else(|_| self.key.decrypt_blinded(&mut OsRng, Oaep::new::<sha1::Sha1>(), &sealed))
            .map_err(|_| refuse("the token does not decrypt with this key (made with another key?)".into()))?;
        let creds = Credentials::parse(&text).map_err(refuse)?;
        let user = &creds.user;
        match creds.skew_from(now) {
            Some(skew) if skew <= self.skew_seconds => {}
            _ => {
                return Err(refuse(format!(
                    "user '{user}': the token's time {} is more than --time-skew-threshold {} s from ours ({now})",
                    creds.unix_seconds, self.skew_seconds
                )))
            }
        }
        if !self.users.admits(user, &creds.password) {
            return Err(refuse(format!("user '{user}': unknown, or a wrong password")));
        }
        let until = creds.unix_seconds.saturating_add(i64::try_from(self.skew_seconds).unwrap_or(i64::MAX));
        if !self.used.first_use(&sealed, until, now) {
            return Err(refuse(format!("user '{user}': a token that already started a test (replayed)")));
        }
        Ok(creds.user)
    }
}

/// PEM private keys as iperf3 reads them (OpenSSL's PEM_read_bio_PrivateKey): PKCS#8 or PKCS#1.
fn private_key_of(pem: &str) -> std::result::Result<RsaPrivateKey, String> {
    if pem.starts_with("-----BEGIN RSA PRIVATE KEY-----") {
        RsaPrivateKey::from_pkcs1_pem(pem).map_err(|e| format!("not a PKCS#1 RSA private key: {e}"))
    } else if pem.starts_with("-----BEGIN PRIVATE KEY-----") {
        RsaPrivateKey::from_pkcs8_pem(pem).map_err(|e| format!("not an RSA private key in PKCS#8: {e}"))
    } else {
        Err("not a PEM RSA private key (BEGIN PRIVATE KEY or BEGIN RSA PRIVATE KEY)".into())
    }
}

/// PEM public keys: `BEGIN PUBLIC KEY`, what iperf3 reads (and PKCS#1 `BEGIN RSA PUBLIC KEY`).
fn public_key_of(pem: &str) -> std::result::Result<RsaPublicKey, String> {
    if pem.starts_with("-----BEGIN RSA PUBLIC KEY-----") {
        RsaPublicKey::from_pkcs1_pem(pem).map_err(|e| format!("not a PKCS#1 RSA public key: {e}"))
    } else if pem.starts_with("-----BEGIN PUBLIC KEY-----") {
        RsaPublicKey::from_public_key_pem(pem).map_err(|e| format!("not an RSA public key: {e}"))
    } else {
        Err("not a PEM RSA public key (BEGIN PUBLIC KEY)".into())
    }
}

/// `send --iperf3`'s side: who we are to the server and the key we encrypt that with.
#[derive(Clone)]
pub struct ClientAuth {
    user: String,
    password: String,
    key: RsaPublicKey,
    padding: RsaPadding,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientAuth(user {}, {:?}, {}-bit key)", self.user, self.padding, self.key.size() * 8)
    }
}

impl ClientAuth {
    /// `--username USER` with its password (iperf3's IPERF3_PASSWORD) and
    /// `--rsa-public-key-path` (PEM); refused when the credentials cannot travel under that key.
    pub fn load(user: &str, password: &str, public_key: &Path, padding: RsaPadding) -> Result<ClientAuth> {
        check_credential("user name", user).map_err(|e| Error::usage(format!("--username: {e}")))?;
        check_credential("password", password).map_err(|e| Error::usage(format!("IPERF3_PASSWORD: {e}")))?;
        const KEY: &str = "--rsa-public-key-path";
        let text = read_key_file(KEY, public_key)?;
        let key = public_key_of(text.trim()).map_err(|why| file_error(KEY, public_key, why))?;
        let room = key.size().saturating_sub(match padding {
            RsaPadding::Pkcs1 => PKCS1_OVERHEAD,
            RsaPadding::Oaep => OAEP_SHA1_OVERHEAD,
        });
        let longest = Credentials { user: user.into(), password: password.into(), unix_seconds: i64::MIN };
        if longest.to_text().len() > room {
            return Err(Error::usage(format!(
                "--username and its password are too long for the {}-bit key of {KEY} {} ({room} bytes of credentials fit)",
                key.size() * 8,
                public_key.display()
            )));
        }
        Ok(ClientAuth { user: user.into(), password: password.into(), key, padding })
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// The parameters' `authtoken`, stamped with Unix time `now`.
    pub fn token(&self, now: i64) -> Result<String> {
        let creds = Credentials { user: self.user.clone(), password: self.password.clone(), unix_seconds: now };
        let text = creds.to_text();
        let sealed = match self.padding {
            RsaPadding::Pkcs1 => self.key.encrypt(&mut OsRng, Pkcs1v15Encrypt, text.as_bytes()),
            RsaPadding::Oaep => self.key.encrypt(&mut OsRng, Oaep::new::<sha1::Sha1>(), text.as_bytes()),
        }
        .map_err(|e| Error::usage(format!("encrypting the credentials for the iperf3 server: {e}")))?;
        Ok(BASE64.encode(sealed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf3::auth::credential_hash;
    use std::io::Write;

    const PRIVATE_PKCS8: &str = include_str!("auth_testdata/private-pkcs8.pem");
    const PRIVATE_PKCS1: &str = include_str!("auth_testdata/private-pkcs1.pem");
    const PUBLIC: &str = include_str!("auth_testdata/public.pem");
    /// `user: mario\npwd:  rossi\nts:   1700000000`, encrypted by OpenSSL with each padding.
    const TOKEN_PKCS1: &str = include_str!("auth_testdata/token-pkcs1.b64");
    const TOKEN_OAEP: &str = include_str!("auth_testdata/token-oaep.b64");
    const MADE_AT: i64 = 1_700_000_000;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn users() -> tempfile::NamedTempFile {
        let hex: String = credential_hash("mario", "rossi").iter().map(|b| format!("{b:02x}")).collect();
        file(&format!("# test users\nmario,{hex}\n"))
    }

    fn server(key: &str) -> ServerAuth {
        let (key, users) = (file(key), users());
        ServerAuth::load(key.path(), users.path(), DEFAULT_SKEW_SECONDS).unwrap()
    }

    #[test]
    fn server_reads_openssl_tokens_in_both_paddings_with_either_key_format() {
        for key in [PRIVATE_PKCS8, PRIVATE_PKCS1] {
            let server = server(key);
            for token in [TOKEN_PKCS1, TOKEN_OAEP] {
                assert_eq!(server.check(Some(token.trim()), MADE_AT + 3).unwrap(), "mario");
            }
        }
    }

    #[test]
    fn server_refuses_stale_absent_and_broken_tokens_with_error_142() {
        let server = server(PRIVATE_PKCS8);
        let refused = |token: Option<&str>, now: i64| {
            let r = server.check(token, now).unwrap_err();
            assert_eq!(r.code, error_code::AUTH, "{}", r.reason);
            r.reason
        };
        let token = Some(TOKEN_PKCS1.trim());
        assert!(refused(token, MADE_AT + 11).contains("--time-skew-threshold 10"));
        assert_eq!(server.check(token, MADE_AT + 10).unwrap(), "mario", "at the threshold");
        assert!(refused(token, MADE_AT + 10).contains("replayed"), "a token starts one test");
        assert_eq!(server.check(Some(TOKEN_OAEP.trim()), MADE_AT).unwrap(), "mario", "another token does");
        assert!(refused(token, MADE_AT - 11).contains("more than"));
        assert!(refused(None, MADE_AT).contains("no credentials"));
        assert!(refused(Some("not base64!"), MADE_AT).contains("base64"));
        assert!(refused(Some("AAAA"), MADE_AT).contains("not the 128"));
        assert!(refused(Some(&BASE64.encode([7u8; 128])), MADE_AT).contains("does not decrypt"));
        assert!(refused(Some(&"A".repeat(MAX_AUTHTOKEN_LEN + 4)), MADE_AT).contains("bytes"));
    }

    #[test]
    fn our_client_tokens_pass_our_server_and_wrong_ones_do_not() {
        let server = server(PRIVATE_PKCS1);
        let public = file(PUBLIC);
        for padding in [RsaPadding::Pkcs1, RsaPadding::Oaep] {
            let good = ClientAuth::load("mario", "rossi", public.path(), padding).unwrap();
            let token = good.token(MADE_AT).unwrap();
            assert!(token.len() <= MAX_AUTHTOKEN_LEN && BASE64.decode(&token).unwrap().len() == 128);
            assert_eq!(server.check(Some(&token), MADE_AT).unwrap(), "mario");
            let wrong = ClientAuth::load("mario", "rosso", public.path(), padding).unwrap();
            let why = server.check(Some(&wrong.token(MADE_AT).unwrap()), MADE_AT).unwrap_err().reason;
            assert!(why.contains("user 'mario': unknown, or a wrong password"), "{why}");
            let stranger = ClientAuth::load("luigi", "rossi", public.path(), padding).unwrap();
            assert!(server.check(Some(&stranger.token(MADE_AT).unwrap()), MADE_AT).is_err());
        }
    }

    #[test]
    fn bad_files_and_credentials_are_usage_errors_naming_them() {
        let users = users();
        let err = |r: Result<ServerAuth>| {
            let e = r.unwrap_err();
            assert_eq!(e.exit_code(), 2);
            e.to_string()
        };
        let public = file(PUBLIC);
        let msg = err(ServerAuth::load(public.path(), users.path(), 10));
        assert!(msg.contains("--rsa-private-key-path") && msg.contains("not a PEM RSA private key"), "{msg}");
        let garbled = file(&PRIVATE_PKCS8.replace('M', "x"));
        assert!(err(ServerAuth::load(garbled.path(), users.path(), 10)).contains("PKCS#8"));
        let locked = file("-----BEGIN ENCRYPTED PRIVATE KEY-----\n");
        assert!(err(ServerAuth::load(locked.path(), users.path(), 10)).contains("passphrase"));
        let key = file(PRIVATE_PKCS8);
        let msg = err(ServerAuth::load(key.path(), Path::new("/nonexistent/users"), 10));
        assert!(msg.contains("--authorized-users-path /nonexistent/users: cannot read it"), "{msg}");
        let bad_users = file("mario\n");
        assert!(err(ServerAuth::load(key.path(), bad_users.path(), 10)).contains("line 1: no comma"));
        assert!(err(ServerAuth::load(key.path(), users.path(), 0)).contains("--time-skew-threshold"));

        let client = |user: &str, password: &str, path: &Path| ClientAuth::load(user, password, path, RsaPadding::Oaep);
        let msg = client("mario", "rossi", key.path()).unwrap_err().to_string();
        assert!(msg.contains("--rsa-public-key-path") && msg.contains("BEGIN PUBLIC KEY"), "{msg}");
        assert!(client("ma rio", "rossi", public.path()).unwrap_err().to_string().contains("--username"));
        assert!(client("mario", "", public.path()).unwrap_err().to_string().contains("IPERF3_PASSWORD"));
        let long = "p".repeat(80);
        assert!(client("mario", &long, public.path())
            .unwrap_err()
            .to_string()
            .contains("too long for the 1024-bit key"));
    }
}
