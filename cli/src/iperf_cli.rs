//! iperf's command line on uringbench: `uringbench -s [flags]` is rewritten into `recv` and
//! `uringbench -c HOST [flags]` into `send` before clap parses, flag by flag from [`FLAGS`]. A
//! flag with no equivalent is refused with what to use instead. docs/iperf.md is [`FLAGS`] as
//! a table (a test keeps the two equal, and checks every native flag named here against the
//! clap definitions).

/// Which side of an iperf command line a flag belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    Client,
    Server,
    Both,
}

/// What an iperf flag becomes.
#[derive(Clone, Copy, Debug)]
pub enum Map {
    /// This native flag, with the iperf value (if any) passed on as typed.
    Native(&'static str),
    /// These native arguments, for a flag that takes no value.
    Fixed(&'static [&'static str]),
    /// Accepted: what it asks for is always so; says how.
    Always(&'static str),
    /// Refused; says what to use instead.
    Refused(&'static str),
    /// Handled by [`translate`] itself; says what it does (docs/iperf.md reads it).
    Special(#[cfg_attr(not(test), allow(dead_code))] &'static str),
}

/// One iperf flag: its spellings, whether it takes a value, which iperf has it, and its map.
#[derive(Debug)]
pub struct Flag {
    pub short: Option<char>,
    pub long: &'static [&'static str],
    /// The value's name, or `None` for a switch.
    pub value: Option<&'static str>,
    /// "2", "3" or "2, 3": the iperf versions that have the flag with this meaning (for
    /// docs/iperf.md).
    #[cfg_attr(not(test), allow(dead_code))]
    pub iperf: &'static str,
    pub side: Side,
    pub map: Map,
}

const fn flag(
    short: Option<char>,
    long: &'static [&'static str],
    value: Option<&'static str>,
    iperf: &'static str,
    side: Side,
    map: Map,
) -> Flag {
    Flag { short, long, value, iperf, side, map }
}

use Map::*;
use Side::*;

/// iperf3's RSA credentials: `-s` and `-c` speak uringbench's own protocol, whose secret is a
/// shared one; the iperf3 modes speak iperf3's.
const RSA_SERVER: &str = "`-s` serves uringbench senders, which prove a shared secret (--psk-file FILE on both ends); \
     iperf3 clients with credentials: `uringbench recv --iperf3 --rsa-private-key-path FILE --authorized-users-path FILE`";
const RSA_CLIENT: &str =
    "`-c` talks to `uringbench recv`, which takes a shared secret (--psk-file FILE on both ends); \
     an iperf3 server requiring credentials: `uringbench send --iperf3 --username USER --rsa-public-key-path FILE`";
const NOT_TCP_UDP: &str = "uringbench tests TCP and UDP only";

/// Every iperf2 and iperf3 flag. Where the two give one letter different meanings, the letter
/// follows iperf3 and iperf2's meaning is reachable by its long name.
pub const FLAGS: &[Flag] = &[
    // The two modes.
    flag(Some('s'), &["server"], None, "2, 3", Server, Special("runs `uringbench recv`")),
    flag(Some('c'), &["client"], Some("HOST"), "2, 3", Client, Special("runs `uringbench send -c HOST`")),
    // Both sides.
    flag(Some('p'), &["port"], Some("PORT"), "2, 3", Both, Native("-p")),
    flag(Some('A'), &["affinity"], Some("CPUS"), "3", Both, Native("--cpus")),
    flag(Some('B'), &["bind"], Some("ADDR"), "2, 3", Client, Native("-B")),
    flag(Some('B'), &["bind"], Some("ADDR"), "2, 3", Server, Native("--bind")),
    flag(None, &["bind-dev"], Some("DEV"), "3", Both, Native("--bind-dev")),
    flag(Some('V'), &["verbose"], None, "3", Client, Native("-v")),
    flag(Some('V'), &["verbose"], None, "3", Server, Always("recv prints the same lines with or without it")),
    flag(Some('h'), &["help"], None, "2, 3", Both, Special("shows `uringbench send --help` (with -s: `recv --help`)")),
    flag(Some('v'), &["version"], None, "2, 3", Both, Special("runs `uringbench --version`")),
    flag(Some('I'), &["pidfile"], Some("FILE"), "3", Server, Refused("-D prints the receiver's process id")),
    flag(Some('d'), &["debug"], None, "3", Both, Refused("-J shows every figure; iperf2's -d is --bidir")),
    flag(Some('m'), &["mptcp"], None, "3", Client, Native("-m")),
    flag(Some('m'), &["mptcp"], None, "3", Server, Always("recv accepts MPTCP senders without a flag")),
    flag(None, &["forceflush"], None, "3", Both, Always("every line is flushed as it is printed")),
    flag(
        None,
        &["timestamps"],
        Some("FORMAT"),
        "3",
        Both,
        Refused("-T TEXT labels every line; --json-stream events carry times"),
    ),
    flag(
        None,
        &["rcv-timeout"],
        Some("MS"),
        "3",
        Both,
        Refused("a peer that stops ends the test as incomplete, exit 1"),
    ),
    flag(
        None,
        &["snd-timeout"],
        Some("MS"),
        "3",
        Both,
        Refused("a peer that stops ends the test as incomplete, exit 1"),
    ),
    // Server.
    flag(
        Some('D'),
        &["daemon"],
        None,
        "2, 3",
        Server,
        Special("runs `uringbench recv` in the background and prints its process id"),
    ),
    flag(Some('1'), &["one-off"], None, "3", Server, Native("--once")),
    flag(None, &["server-bitrate-limit"], Some("RATE"), "3", Server, Native("--max-rate")),
    flag(
        None,
        &["idle-timeout"],
        Some("SECS"),
        "3",
        Server,
        Refused("recv serves until stopped; --once exits after one test"),
    ),
    flag(None, &["rsa-private-key-path"], Some("FILE"), "3", Server, Refused(RSA_SERVER)),
    flag(None, &["authorized-users-path"], Some("FILE"), "3", Server, Refused(RSA_SERVER)),
    flag(None, &["time-skew-threshold"], Some("SECS"), "3", Server, Refused(RSA_SERVER)),
    flag(None, &["use-pkcs1-padding"], None, "3", Server, Refused(RSA_SERVER)),
    flag(Some('u'), &["udp"], None, "2", Server, Always("recv serves TCP and UDP tests on one port")),
    flag(Some('4'), &["version4", "ipv4"], None, "2, 3", Server, Fixed(&["--bind", "0.0.0.0"])),
    flag(
        Some('6'),
        &["version6", "ipv6"],
        None,
        "2, 3",
        Server,
        Always("recv listens on :: by default, which takes IPv6"),
    ),
    flag(
        Some('i'),
        &["interval"],
        Some("SECS"),
        "2, 3",
        Server,
        Refused("give -i to the client: its report has the receiver's figures per interval"),
    ),
    flag(
        Some('f'),
        &["format"],
        Some("UNIT"),
        "2, 3",
        Server,
        Refused("give -f to the client, whose report has both ends' figures"),
    ),
    flag(Some('J'), &["json"], None, "3", Server, Refused("give -J to the client: its report has both ends' figures")),
    flag(
        Some('w'),
        &["window"],
        Some("BYTES"),
        "2, 3",
        Server,
        Refused("give -w to the client: it sets the buffers on both ends"),
    ),
    flag(
        Some('P'),
        &["parallel"],
        Some("N"),
        "2",
        Server,
        Refused("recv serves any number of flows; --once exits after one test"),
    ),
    flag(
        Some('t'),
        &["time"],
        Some("SECS"),
        "2",
        Server,
        Refused("recv serves until stopped; --once exits after one test"),
    ),
    flag(Some('U'), &["single_udp"], None, "2", Server, Refused("recv's UDP flows each have their own socket")),
    flag(None, &["logfile"], Some("FILE"), "3", Server, Refused("redirect recv's output: uringbench -s >> FILE")),
    // Client.
    flag(Some('u'), &["udp"], None, "2, 3", Client, Native("-u")),
    flag(Some('b'), &["bitrate", "bandwidth"], Some("RATE[/N]"), "2, 3", Client, Native("-b")),
    flag(Some('t'), &["time"], Some("SECS"), "2, 3", Client, Native("-t")),
    flag(Some('n'), &["bytes", "num"], Some("BYTES"), "2, 3", Client, Native("-n")),
    flag(Some('k'), &["blockcount"], Some("N"), "3", Client, Special("`-n` of N times the -l length")),
    flag(Some('l'), &["length", "len"], Some("BYTES"), "2, 3", Client, Native("-l")),
    flag(Some('P'), &["parallel"], Some("N"), "2, 3", Client, Native("-P")),
    flag(Some('R'), &["reverse"], None, "2, 3", Client, Native("-R")),
    flag(None, &["bidir", "full-duplex", "dualtest"], None, "2, 3", Client, Native("--bidir")),
    flag(Some('r'), &["tradeoff"], None, "2", Client, Refused("run a second test with -R")),
    flag(Some('i'), &["interval"], Some("SECS"), "2, 3", Client, Native("-i")),
    flag(Some('f'), &["format"], Some("UNIT"), "2, 3", Client, Native("-f")),
    flag(Some('w'), &["window"], Some("BYTES"), "2, 3", Client, Native("-w")),
    flag(Some('M'), &["set-mss", "mss"], Some("BYTES"), "2, 3", Client, Native("-M")),
    flag(Some('N'), &["no-delay", "nodelay"], None, "2, 3", Client, Native("-N")),
    flag(Some('C'), &["congestion", "linux-congestion", "tcp-congestion"], Some("ALGO"), "3", Client, Native("-C")),
    flag(Some('S'), &["tos"], Some("TOS"), "2, 3", Client, Native("-S")),
    flag(None, &["dscp"], Some("DSCP"), "3", Client, Native("--dscp")),
    flag(Some('4'), &["version4", "ipv4"], None, "2, 3", Client, Native("-4")),
    flag(Some('6'), &["version6", "ipv6"], None, "3", Client, Native("-6")),
    flag(None, &["ipv6_domain"], None, "2", Client, Native("-6")),
    flag(Some('Z'), &["zerocopy"], None, "3", Client, Fixed(&["--zerocopy", "on"])),
    flag(None, &["skip-rx-copy"], None, "3", Client, Native("--skip-rx-copy")),
    flag(Some('O'), &["omit"], Some("SECS"), "3", Client, Native("--warmup")),
    flag(Some('J'), &["json"], None, "3", Client, Native("-J")),
    flag(None, &["json-stream"], None, "3", Client, Native("--json-stream")),
    flag(None, &["json-stream-full-output"], None, "3", Client, Native("--json-stream-full-output")),
    flag(None, &["logfile"], Some("FILE"), "3", Client, Native("--logfile")),
    flag(Some('o'), &["output"], Some("FILE"), "2", Client, Native("--logfile")),
    flag(Some('T'), &["title"], Some("TEXT"), "3", Client, Native("-T")),
    flag(None, &["cport"], Some("PORT"), "3", Client, Native("--cport")),
    flag(None, &["fq-rate"], Some("RATE"), "3", Client, Native("--fq-rate")),
    flag(None, &["trip-times"], None, "2", Client, Native("--one-way-delay")),
    flag(Some('y'), &["reportstyle"], Some("C"), "2", Client, Special("`--format csv` (C is the only style)")),
    flag(Some('e'), &["enhanced"], None, "2", Client, Always("the report always has retransmits, RTT and CPU")),
    flag(None, &["get-server-output"], None, "3", Client, Always("the report always has the receiver's figures")),
    flag(None, &["udp-counters-64bit"], None, "3", Client, Always("every counter is 64 bits")),
    flag(
        None,
        &["gsro"],
        None,
        "3",
        Client,
        Always("UDP flows use GSO to send and GRO to receive wherever the kernel takes them (--no-gso: neither)"),
    ),
    flag(None, &["print_mss"], None, "2", Client, Always("-J shows each flow's TCP_INFO, its MSS included")),
    flag(
        Some('F'),
        &["file", "fileinput"],
        Some("FILE"),
        "2, 3",
        Client,
        Refused("uringbench sends its own payload; measure the network, then the disk"),
    ),
    flag(
        Some('L'),
        &["flowlabel"],
        Some("N"),
        "3",
        Client,
        Refused("no IPv6 flow label option; iperf2's -L (listen port) is -p on both ends"),
    ),
    flag(None, &["connect-timeout"], Some("MS"), "3", Client, Refused("connecting gives up after 3 s")),
    flag(
        None,
        &["pacing-timer"],
        Some("USECS"),
        "3",
        Client,
        Refused("-b paces each flow evenly; --fq-rate paces in the kernel"),
    ),
    flag(None, &["extra-data"], Some("TEXT"), "3", Client, Refused("-T TEXT labels the report")),
    flag(None, &["repeating-payload"], None, "3", Client, Refused("uringbench sends its own payload")),
    flag(
        None,
        &["dont-fragment"],
        None,
        "3",
        Client,
        Refused("keep -l within the path MTU (uringbench doctor -c HOST shows it)"),
    ),
    flag(None, &["username", "rsa-public-key-path"], Some("VALUE"), "3", Client, Refused(RSA_CLIENT)),
    flag(
        None,
        &["cntl-ka"],
        Some("SPEC"),
        "3",
        Client,
        Refused("the control connection needs no keepalive: tests are bounded"),
    ),
    flag(None, &["sctp", "nstreams"], None, "3", Client, Refused(NOT_TCP_UDP)),
    flag(Some('X'), &["xbind", "peer-detect"], Some("ADDR"), "2, 3", Client, Refused(NOT_TCP_UDP)),
    flag(Some('x'), &["reportexclude"], Some("CDMSV"), "2", Client, Refused("-J and pick the keys you need")),
    flag(Some('z'), &["realtime"], None, "2", Client, Refused("queue threads are pinned to CPUs instead (-A)")),
    flag(None, &["ttl"], Some("N"), "2", Client, Refused("no TTL option")),
    flag(
        None,
        &["isochronous", "ipg", "burst-size", "burst-period"],
        Some("VALUE"),
        "2",
        Client,
        Refused("-b paces each flow evenly"),
    ),
    flag(None, &["histograms"], None, "2", Client, Refused("uringbench rr -c HOST reports latency percentiles")),
    flag(
        None,
        &["bounceback"],
        None,
        "2",
        Client,
        Refused("uringbench rr --bounceback N -c HOST sends bursts of N requests"),
    ),
    flag(None, &["connect-only"], None, "2", Client, Refused("uringbench crr -c HOST measures connections per second")),
    flag(None, &["sum-only"], None, "2", Client, Refused("-J and read the sum")),
    flag(None, &["txstart-time"], Some("TIME"), "2", Client, Native("--start-at")),
];

/// An iperf command line rewritten: the native arguments and what to say about them.
#[derive(Debug, PartialEq)]
pub struct Translation {
    /// The native command line, `uringbench` first.
    pub argv: Vec<String>,
    /// `-D`: run the receiver in the background.
    pub daemon: bool,
    /// Notes of flags accepted as always so.
    pub notes: Vec<String>,
}

impl Translation {
    /// The native command as one line a shell would take back.
    pub fn native_line(&self) -> String {
        self.argv.iter().map(|a| shell_word(a)).collect::<Vec<_>>().join(" ")
    }

    /// Whether stdout carries a document (JSON or CSV) that a leading line would spoil.
    pub fn machine_output(&self) -> bool {
        self.argv.iter().any(|a| ["-J", "--json", "--json-stream", "csv"].contains(&a.as_str()))
    }

    /// The line that says which native command an iperf command line ran.
    pub fn ran_as(&self) -> String {
        let mut line = format!("iperf flags ran as: {}", self.native_line());
        for note in &self.notes {
            line.push_str(&format!(" ({note})"));
        }
        line
    }
}

fn shell_word(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:,=%@+".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// The spelling of a flag as typed: `-P` or `--parallel`.
fn spelling(short: Option<char>, long: &str) -> String {
    short.map_or(format!("--{long}"), |c| format!("-{c}"))
}

/// One flag as typed, before the mode is known.
struct Typed {
    /// As typed, for messages.
    text: String,
    short: Option<char>,
    long: Option<String>,
    /// A value attached with `=` or to the letter (`-P4`).
    attached: Option<String>,
}

fn lookup(t: &Typed, side: Side) -> Result<&'static Flag, String> {
    let matches = |f: &&Flag| match (&t.short, &t.long) {
        (Some(c), _) => f.short == Some(*c),
        (None, Some(l)) => f.long.contains(&l.as_str()),
        (None, None) => false,
    };
    let mut candidates = FLAGS.iter().filter(matches).peekable();
    if candidates.peek().is_none() {
        return Err(format!("{} is not an iperf option (see docs/iperf.md, or uringbench --help)", t.text));
    }
    let all: Vec<&Flag> = candidates.collect();
    all.iter().copied().find(|f| f.side == side || f.side == Both).ok_or_else(|| match side {
        Server => format!("{} is a client option: give it to uringbench -c HOST", t.text),
        _ => format!("{} applies to the receiver: uringbench -s {}", t.text, t.text),
    })
}

/// Rewrites an iperf command line (`uringbench -s ...`, `uringbench -c HOST ...`) into the
/// native one. `None`: not an iperf command line (a subcommand, or clap's own -h/-V); it is
/// parsed as it is. An error is the one-line message for exit code 2.
pub fn translate(argv: &[String]) -> Result<Option<Translation>, String> {
    let Some(first) = argv.get(1) else { return Ok(None) };
    if !first.starts_with('-') || (argv.len() == 2 && ["-h", "--help", "-V", "--version"].contains(&first.as_str())) {
        return Ok(None);
    }
    let typed = split(&argv[1..])?;
    let is = |t: &Typed, c: char, l: &str| t.short == Some(c) || t.long.as_deref() == Some(l);
    let server = typed.iter().any(|t| is(t, 's', "server"));
    let client = typed.iter().any(|t| is(t, 'c', "client"));
    let side = match (server, client) {
        (true, true) => return Err("give -s (receive) or -c HOST (send), not both".into()),
        (true, false) => Server,
        (false, true) => Client,
        (false, false) if typed.iter().any(|t| is(t, 'v', "version")) => {
            return Ok(Some(Translation {
                argv: vec!["uringbench".into(), "--version".into()],
                daemon: false,
                notes: vec![],
            }))
        }
        (false, false) => {
            return Err(format!(
                "unexpected {first}: give a command (recv, send, rr, ...; see --help), or iperf's -s or -c HOST"
            ))
        }
    };
    let mut native: Vec<String> = vec!["uringbench".into(), if side == Server { "recv" } else { "send" }.into()];
    let mut out = Translation { argv: Vec::new(), daemon: false, notes: Vec::new() };
    let (mut blocks, mut len, mut udp, mut bytes) = (None::<String>, None::<String>, false, false);
    let mut rest = typed.into_iter().peekable();
    while let Some(t) = rest.next() {
        let f = lookup(&t, side)?;
        let value = match f.value {
            Some(name) => Some(match t.attached.clone() {
                Some(v) => v,
                None => match rest.peek() {
                    // A negative number (`-P -1`) is the value, refused by the native parser
                    // with its range, not a flag.
                    Some(next)
                        if (next.short.is_none() && next.long.is_none())
                            || next
                                .text
                                .strip_prefix('-')
                                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit())) =>
                    {
                        rest.next().map(|n| n.text).unwrap_or_default()
                    }
                    _ => return Err(format!("{} needs a value ({name})", t.text)),
                },
            }),
            None if t.attached.is_some() => return Err(format!("{} takes no value", t.text)),
            None => None,
        };
        let name = spelling(t.short, t.long.as_deref().unwrap_or(""));
        match (f.map, value) {
            (Special(_), v) => match f.short.or(f.long[0].chars().next()) {
                Some('s') => {}
                Some('c') => native.extend(["-c".to_string(), v.unwrap_or_default()]),
                Some('D') => out.daemon = true,
                Some('h') => native.push("--help".into()),
                Some('v') => native = vec!["uringbench".into(), "--version".into()],
                Some('k') => blocks = v,
                Some('y') if v.as_deref().is_some_and(|v| v.eq_ignore_ascii_case("c")) => {
                    native.extend(["--format".to_string(), "csv".to_string()])
                }
                _ => return Err(format!("{name} {}: only C (CSV) is a report style here", v.unwrap_or_default())),
            },
            (Native(to), v) => {
                udp |= to == "-u";
                bytes |= to == "-n";
                if to == "-l" {
                    len = v.clone();
                }
                native.push(to.to_string());
                native.extend(v);
            }
            (Fixed(args), _) => native.extend(args.iter().map(|a| a.to_string())),
            (Always(note), _) => out.notes.push(format!("{name}: {note}")),
            (Refused(hint), _) => return Err(format!("{name} has no uringbench equivalent: {hint}")),
        }
    }
    if let Some(k) = blocks {
        if bytes {
            return Err("give -n or -k, not both".into());
        }
        let count: u64 = k.trim().parse().map_err(|_| format!("-k {k}: expected a number of blocks"))?;
        let block = match &len {
            Some(l) => uringbench::units::parse_size(l).map_err(|e| format!("-l {l}: {}", e.message))?,
            None => crate::args::default_len(udp),
        };
        let total = count.checked_mul(block).filter(|b| *b > 0).ok_or_else(|| format!("-k {k}: out of range"))?;
        native.extend(["-n".to_string(), total.to_string()]);
    }
    out.argv = native;
    Ok(Some(out))
}

/// Splits the arguments into flags with their attached values; a bare word stays a word (a
/// flag's value). Grouped switches (`-uR`) are split as getopt does.
fn split(args: &[String]) -> Result<Vec<Typed>, String> {
    let mut typed = Vec::new();
    for a in args {
        if let Some(long) = a.strip_prefix("--") {
            if long.is_empty() {
                return Err("-- is not an iperf option".into());
            }
            let (name, value) = long.split_once('=').map_or((long, None), |(n, v)| (n, Some(v.to_string())));
            typed.push(Typed { text: a.clone(), short: None, long: Some(name.to_string()), attached: value });
        } else if let Some(shorts) =
            a.strip_prefix('-').filter(|s| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit() && s.len() > 1))
        {
            for (i, c) in shorts.char_indices() {
                let takes_value = FLAGS.iter().any(|f| f.short == Some(c) && f.value.is_some());
                let after = &shorts[i + c.len_utf8()..];
                if takes_value || after.is_empty() {
                    let attached = (!after.is_empty()).then(|| after.to_string());
                    typed.push(Typed { text: format!("-{c}"), short: Some(c), long: None, attached });
                    break;
                }
                typed.push(Typed { text: format!("-{c}"), short: Some(c), long: None, attached: None });
            }
        } else {
            typed.push(Typed { text: a.clone(), short: None, long: None, attached: None });
        }
    }
    Ok(typed)
}

/// docs/iperf.md's table: every flag of [`FLAGS`] with what it does here.
#[cfg(test)]
fn markdown_table() -> String {
    let mut out = String::from("| iperf flag | iperf | side | uringbench |\n|---|---|---|---|\n");
    for f in FLAGS {
        let mut names: Vec<String> = f.short.map(|c| format!("`-{c}`")).into_iter().collect();
        names.extend(f.long.iter().map(|l| format!("`--{l}`")));
        let names = match f.value {
            Some(v) => format!("{} {v}", names.join(", ")),
            None => names.join(", "),
        };
        let side = match f.side {
            Client => "-c",
            Server => "-s",
            Both => "both",
        };
        let what = match f.map {
            Native(to) => format!("`{to}`{}", f.value.map_or(String::new(), |v| format!(" {v}"))),
            Fixed(args) => format!("`{}`", args.join(" ")),
            Always(note) => format!("accepted: {note}"),
            Refused(hint) => format!("refused: {hint}"),
            Special(what) => what.to_string(),
        };
        out.push_str(&format!("| {names} | {} | {side} | {what} |\n", f.iperf));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn t(line: &str) -> Result<Option<Translation>, String> {
        let argv: Vec<String> =
            std::iter::once("uringbench").chain(line.split_whitespace()).map(String::from).collect();
        translate(&argv)
    }
    fn native(line: &str) -> String {
        t(line).unwrap_or_else(|e| panic!("{line}: {e}")).expect("an iperf command line").native_line()
    }

    #[test]
    fn subcommands_and_clap_flags_pass_through() {
        for line in ["send -c 10.0.0.2", "recv", "--help", "-V", "-h", "--version"] {
            assert_eq!(t(line), Ok(None), "{line}");
        }
    }

    #[test]
    fn iperf3_3_20_and_3_21_flags_pass_or_are_always_so() {
        let line = "-c h -u --gsro --json-stream --json-stream-full-output";
        assert_eq!(native(line), "uringbench send -c h -u --json-stream --json-stream-full-output");
        let ran = t(line).unwrap().unwrap().ran_as();
        assert!(ran.contains("GSO") && ran.contains("GRO"), "{ran}");
    }

    #[test]
    fn iperf3_habits_become_send_and_recv() {
        assert_eq!(native("-s"), "uringbench recv");
        assert_eq!(native("-s -p 5201 -1"), "uringbench recv -p 5201 --once");
        assert_eq!(native("-c 10.0.0.2 -P 4 -t 3"), "uringbench send -c 10.0.0.2 -P 4 -t 3");
        assert_eq!(native("-c10.0.0.2 -P4 -uR"), "uringbench send -c 10.0.0.2 -P 4 -u -R");
        assert_eq!(native("--client=h --parallel=2 --bitrate 5M"), "uringbench send -c h -P 2 -b 5M");
        assert_eq!(native("-c h -O 2 -A 1,2 -Z -f m"), "uringbench send -c h --warmup 2 --cpus 1,2 --zerocopy on -f m");
        assert_eq!(native("-c h -k 10 -l 1K"), "uringbench send -c h -l 1K -n 10240");
        assert_eq!(native("-c h -k 3"), format!("uringbench send -c h -n {}", 3 * 128 * 1024));
        assert_eq!(native("-c h -y C"), "uringbench send -c h --format csv");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(native("-v"), "uringbench --version");
        assert_eq!(native("-c h -h"), "uringbench send -c h --help");
        let d = t("-s -D").unwrap().unwrap();
        assert!(d.daemon);
        let v = t("-c h -V").unwrap().unwrap();
        assert_eq!(v.native_line(), "uringbench send -c h -v", "iperf3's -V is send's -v");
        assert_eq!(native("-c h -P -1"), "uringbench send -c h -P -1", "a negative value is the value");
        assert!(t("-c h -J").unwrap().unwrap().machine_output());
        assert!(!t("-c h").unwrap().unwrap().machine_output());
    }

    #[test]
    fn flags_without_an_equivalent_say_what_to_use() {
        for (line, needle) in [
            ("-c h -r", "-R"),
            ("-c h --rsa-public-key-path k", "--psk-file"),
            ("-s -w 4M", "give -w to the client"),
            ("-s -c h", "not both"),
            ("-P 4", "-c HOST"),
            ("-c h -D", "uringbench -s -D"),
            ("-s -R", "client option"),
            ("-c h -Q", "not an iperf option"),
            ("-c h -P", "needs a value"),
            ("-c h -y X", "only C"),
            ("-c h -k 2 -n 5", "-n or -k"),
            ("-c h --udp=1", "takes no value"),
        ] {
            let err = t(line).expect_err(line);
            assert!(err.contains(needle), "{line}: {err}");
            assert_eq!(err.lines().count(), 1, "{line}: {err}");
        }
    }

    /// Every native flag a mapping names exists in the clap command it runs.
    #[test]
    fn every_mapping_names_real_native_flags() {
        let cli = crate::args::Cli::command();
        for f in FLAGS {
            let sides: &[&str] = match f.side {
                Client => &["send"],
                Server => &["recv"],
                Both => &["send", "recv"],
            };
            let natives: Vec<&str> = match f.map {
                Native(to) => vec![to],
                Fixed(args) => args.iter().copied().filter(|a| a.starts_with('-')).collect(),
                _ => vec![],
            };
            for cmd in sides {
                let sub = cli.find_subcommand(cmd).expect("subcommand");
                for n in &natives {
                    let found = sub.get_arguments().any(|a| match n.strip_prefix("--") {
                        Some(l) => a.get_long() == Some(l),
                        None => a.get_short() == n.chars().nth(1),
                    });
                    assert!(found, "{f:?}: {cmd} has no {n}");
                }
            }
        }
    }

    /// Each (letter or long name, side) means one thing.
    #[test]
    fn no_flag_is_mapped_twice() {
        for (i, a) in FLAGS.iter().enumerate() {
            for b in &FLAGS[i + 1..] {
                let overlap = a.side == b.side || a.side == Both || b.side == Both;
                let same = (a.short.is_some() && a.short == b.short) || a.long.iter().any(|l| b.long.contains(l));
                assert!(!(overlap && same), "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn docs_table_is_the_mapping() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/iperf.md")).expect("docs/iperf.md");
        assert!(
            doc.contains(&markdown_table()),
            "docs/iperf.md's table differs from iperf_cli::FLAGS; paste this:\n{}",
            markdown_table()
        );
    }
}
