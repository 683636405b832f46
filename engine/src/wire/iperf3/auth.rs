//! iperf3's authentication texts: the credentials a client encrypts into its `authtoken`
//! (`user: NAME\npwd:  PASSWORD\nts:   UNIX_SECONDS`), and the server's authorized-users file,
//! one `NAME,SHA256HEX` line per user, the hash taken over `{NAME}PASSWORD`. The RSA and base64
//! around the text are in `compat::iperf3::auth`; here are only the texts, each parser strict
//! and bounded (the decrypted text comes from a remote client).

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Longest user name or password read or sent (iperf3 sets none; its users file reads lines
/// of under 1024 bytes).
pub const MAX_CREDENTIAL_LEN: usize = 255;
/// Longest authorized-users file read.
pub const MAX_USERS_FILE_LEN: usize = 1 << 20;

const USER_TAG: &str = "user: ";
const PASSWORD_TAG: &str = "\npwd:  ";
const TIME_TAG: &str = "\nts:   ";

/// What a client proves: its user, password and the time it made the token (Unix seconds,
/// which the server holds against its own clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    pub unix_seconds: i64,
}

/// Why `text` cannot stand as a user name or password in a token: iperf3's server reads each
/// as one whitespace-free word, so one with a space would never match.
pub fn check_credential(what: &str, text: &str) -> Result<(), String> {
    if text.is_empty() || text.len() > MAX_CREDENTIAL_LEN {
        return Err(format!("the {what} must be 1 to {MAX_CREDENTIAL_LEN} bytes, not {}", text.len()));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("the {what} has a space or a control character (iperf3 reads it as one word)"));
    }
    Ok(())
}

impl Credentials {
    /// The text a client encrypts.
    pub fn to_text(&self) -> String {
        format!("{USER_TAG}{}{PASSWORD_TAG}{}{TIME_TAG}{}", self.user, self.password, self.unix_seconds)
    }

    /// Reads a decrypted token: exactly the three lines, each field within its bounds.
    pub fn parse(text: &[u8]) -> Result<Credentials, String> {
        let text = std::str::from_utf8(text).map_err(|_| "the credentials are not UTF-8 text".to_string())?;
        let rest = text.strip_prefix(USER_TAG).ok_or("the credentials do not start with 'user: '")?;
        let (user, rest) = rest.split_once(PASSWORD_TAG).ok_or("the credentials have no 'pwd:' line")?;
        let (password, seconds) = rest.split_once(TIME_TAG).ok_or("the credentials have no 'ts:' line")?;
        check_credential("user name", user)?;
        check_credential("password", password)?;
        let digits = seconds.strip_prefix('-').unwrap_or(seconds);
        if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err("the credentials' time is not a whole number of seconds".into());
        }
        let unix_seconds = seconds.parse().map_err(|_| "the credentials' time is out of range".to_string())?;
        Ok(Credentials { user: user.into(), password: password.into(), unix_seconds })
    }

    /// Seconds between the token's time and `now` (Unix seconds); `None` past i64's range.
    pub fn skew_from(&self, now: i64) -> Option<u64> {
        now.checked_sub(self.unix_seconds).map(i64::unsigned_abs)
    }
}

/// The SHA-256 an authorized-users line holds for `user` with `password`: over `{user}password`.
pub fn credential_hash(user: &str, password: &str) -> [u8; 32] {
    Sha256::digest(format!("{{{user}}}{password}").as_bytes()).into()
}

/// The users a server lets in: each name with its credentials' hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizedUsers {
    users: Vec<(String, [u8; 32])>,
}

impl AuthorizedUsers {
    /// Reads the file's text: a `NAME,SHA256HEX` line per user; empty lines and lines starting
    /// with `#` are skipped. Anything else names its line: a file iperf3 would half-read is
    /// refused whole. A file naming no user is refused too (it would let no one in).
    pub fn parse(text: &str) -> Result<AuthorizedUsers, String> {
        if text.len() > MAX_USERS_FILE_LEN {
            return Err(format!("over {MAX_USERS_FILE_LEN} bytes"));
        }
        let mut users = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("line {}: {why} (each line is USER,SHA256HEX of {{USER}}PASSWORD)", n + 1);
            let (user, hex) = line.split_once(',').ok_or_else(|| bad("no comma"))?;
            check_credential("user name", user).map_err(|e| bad(&e))?;
            let hash = hex_digest(hex).ok_or_else(|| bad("the hash is not 64 hexadecimal digits"))?;
            users.push((user.to_string(), hash));
        }
        if users.is_empty() {
            return Err("names no user".into());
        }
        Ok(AuthorizedUsers { users })
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `user` with `password` is let in. The hashes are compared in constant time, and
    /// one is computed and compared whether or not the user exists.
    pub fn admits(&self, user: &str, password: &str) -> bool {
        let hash = credential_hash(user, password);
        let mut admitted = subtle::Choice::from(0);
        for (name, stored) in &self.users {
            let same_user = subtle::Choice::from(u8::from(name == user));
            admitted |= same_user & stored.ct_eq(&hash);
        }
        admitted.into()
    }
}

/// 64 hexadecimal digits (either case) as 32 bytes.
fn hex_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `echo -n "{mario}rossi" | sha256sum`, the example of iperf3's documentation.
    const MARIO: &str = "mario,bf7a49a846d44b454a5d11e7acfaf13d138bbe0b7483aa3e050879700572709b";

    #[test]
    fn credentials_text_round_trips_and_is_iperf3s_layout() {
        let c = Credentials { user: "mario".into(), password: "rossi".into(), unix_seconds: 1_700_000_000 };
        assert_eq!(c.to_text(), "user: mario\npwd:  rossi\nts:   1700000000");
        assert_eq!(Credentials::parse(c.to_text().as_bytes()).unwrap(), c);
        let old = Credentials { unix_seconds: -5, ..c.clone() };
        assert_eq!(Credentials::parse(old.to_text().as_bytes()).unwrap(), old);
        assert_eq!(c.skew_from(1_700_000_007), Some(7));
        assert_eq!(c.skew_from(1_699_999_990), Some(10));
        assert_eq!(Credentials { unix_seconds: i64::MIN, ..c }.skew_from(1), None, "no wrap");
    }

    #[test]
    fn hostile_credentials_are_refused() {
        let refused = |t: &str| Credentials::parse(t.as_bytes()).unwrap_err();
        assert!(refused("").contains("'user: '"));
        assert!(refused("user: a\npwd: b\nts:   1").contains("'pwd:'"), "one space short");
        assert!(refused("user: a\npwd:  b\n").contains("'ts:'"));
        assert!(refused("user: a\npwd:  b\nts:   ").contains("whole number"));
        assert!(refused("user: a\npwd:  b\nts:   12x").contains("whole number"));
        assert!(refused("user: a\npwd:  b\nts:   1\n").contains("whole number"), "nothing after the time");
        assert!(refused("user: a\npwd:  b\nts:   99999999999999999999").contains("whole number"));
        assert!(refused("user: a\npwd:  b\nts:   9999999999999999999").contains("out of range"));
        assert!(refused("user: \npwd:  b\nts:   1").contains("user name"));
        assert!(refused("user: a b\npwd:  b\nts:   1").contains("space"));
        assert!(refused(&format!("user: a\npwd:  {}\nts:   1", "p".repeat(256))).contains("password"));
        assert!(Credentials::parse(b"user: \xff\npwd:  b\nts:   1").unwrap_err().contains("UTF-8"));
    }

    proptest::proptest! {
        /// Whatever a client's key decrypts to: refused or read, never a panic; what is read
        /// is what a client would have written for it.
        #[test]
        fn any_decrypted_text_is_read_or_refused(
            text in "(user: [a-z ]{0,4}\npwd:  [!-~]{0,6}\nts:   -?[0-9]{1,20}.?)|[\\PC\n]{0,80}"
        ) {
            if let Ok(c) = Credentials::parse(text.as_bytes()) {
                proptest::prop_assert_eq!(Credentials::parse(c.to_text().as_bytes()), Ok(c.clone()));
                proptest::prop_assert!(c.user.len() <= MAX_CREDENTIAL_LEN && !c.password.contains(' '));
            }
        }
    }

    #[test]
    fn users_file_lets_in_only_the_right_password() {
        let users = AuthorizedUsers::parse(&format!("# users\n\n{MARIO}\r\nluigi,{}\n", "AB".repeat(32))).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(credential_hash("mario", "rossi")[..4], [0xbf, 0x7a, 0x49, 0xa8]);
        assert!(users.admits("mario", "rossi"));
        assert!(!users.admits("mario", "rosso"));
        assert!(!users.admits("luigi", "rossi"));
        assert!(!users.admits("peach", "rossi"));
    }

    #[test]
    fn bad_users_files_name_the_line() {
        let refused = |t: &str| AuthorizedUsers::parse(t).unwrap_err();
        assert_eq!(refused("# nobody\n"), "names no user");
        assert!(refused(&format!("{MARIO}\nluigi\n")).starts_with("line 2: no comma"));
        assert!(refused("mario,abc\n").contains("64 hexadecimal"));
        assert!(refused(&format!("{MARIO},extra")).contains("64 hexadecimal"));
        assert!(refused(&format!("{},{}", "a b", "0".repeat(64))).contains("space"));
        assert!(refused(&"x".repeat(MAX_USERS_FILE_LEN + 1)).contains("over"));
    }
}
