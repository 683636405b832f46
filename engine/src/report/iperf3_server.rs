//! `recv --iperf3`'s own output as `iperf3 -s -J` gives it: the document a client's
//! `--get-server-output` gets back as `server_output_json` when the receiver writes JSON.
//! Its shape is iperf3's server document (`start`, `intervals` with `streams` and `sum`,
//! `end` with `streams` and the sums), with 3.20's `start.timestamp.timemillisecs` and, on each
//! TCP stream we sent, the kernel's reordering count (`reorder`). Every figure is one our
//! loops measured (the intervals of our side, the results we give the client); what we do not
//! measure is left out rather than written as 0, where iperf3's server writes zeros for the
//! direction it did not carry (its `sum_sent` of a test it only received).

use crate::base::start_at::rfc1123;
use crate::compat::iperf3::Iperf3TestSummary;
use crate::metrics::figures::{Host, IntervalFigures, SideReport, StreamReport};
use crate::wire::iperf3::{DataProto, Params, Results, StreamResult};
use serde_json::{json, Map, Value};
use std::net::SocketAddr;

impl Iperf3TestSummary {
    /// The iperf3-shaped document of this test (see the module's notes), from its parameters
    /// and `ours`, the results we give the client.
    pub fn server_document(&self, p: &Params, ours: &Results) -> Value {
        let (received, sent) = self.report.as_ref().map_or((None, None), our_sides);
        json!({
            "start": self.start_section(p),
            "intervals": intervals(p, received, sent),
            "end": end_section(p, ours, [received, sent]),
        })
    }

    fn start_section(&self, p: &Params) -> Value {
        let udp = p.proto == DataProto::Udp;
        let mut test_start = json!({
            "protocol": if udp { "UDP" } else { "TCP" },
            "num_streams": p.parallel,
            "blksize": p.len,
            "omit": p.omit,
            "duration": p.time,
            "bytes": p.bytes,
            "blocks": p.blocks,
            "reverse": u8::from(p.reverse),
            "tos": p.tos,
            "target_bitrate": p.rate_bps,
            "bidir": u8::from(p.bidirectional),
            "fqrate": p.fq_rate_bps,
        });
        // What our UDP loops ran with (3.21 says whether its sockets took GSO and GRO).
        for (key, used) in [("gso", self.gso), ("gro", self.gro)] {
            if let Some(used) = used {
                test_start[key] = json!(u8::from(used));
            }
        }
        let mut start = Map::new();
        let local = self.report.as_ref().and_then(|r| r.target.parse::<SocketAddr>().ok());
        if let Some(local) = local {
            let connected: Vec<Value> = self
                .data_peers
                .iter()
                .map(|peer| {
                    json!({
                        "local_host": local.ip().to_string(),
                        "local_port": local.port(),
                        "remote_host": peer.ip().to_string(),
                        "remote_port": peer.port(),
                    })
                })
                .collect();
            start.insert("connected".into(), Value::Array(connected));
        }
        start.insert("version".into(), json!(format!("uringbench {}", env!("CARGO_PKG_VERSION"))));
        if let Some(ms) = self.started_unix_ms {
            let timestamp = json!({ "time": rfc1123(ms / 1000), "timesecs": ms / 1000, "timemillisecs": ms });
            start.insert("timestamp".into(), timestamp);
        }
        if let Some(peer) = self.peer {
            start.insert("accepted_connection".into(), json!({ "host": peer.to_string() }));
        }
        start.insert("target_bitrate".into(), json!(p.rate_bps));
        start.insert("test_start".into(), test_start);
        Value::Object(start)
    }
}

/// Our receiving side and our sending side in the test's report: in each direction, ours is
/// the one this host played.
fn our_sides(report: &StreamReport) -> (Option<&SideReport>, Option<&SideReport>) {
    let (mut received, mut sent) = (None, None);
    for d in std::iter::once(report).chain(report.reverse.as_deref()) {
        if d.roles.data_receiver == Host::This {
            received = d.receiver.as_ref();
        } else {
            sent = Some(&d.sender);
        }
    }
    (received, sent)
}

/// A span's common keys: from `start` to `end` seconds of the test, `bytes` in it.
fn span(start: f64, end: f64, bytes: u64, sender: bool) -> Map<String, Value> {
    let seconds = (end - start).max(0.0);
    let rate = crate::metrics::figures::rate(bytes, seconds);
    let mut m = Map::new();
    for (key, value) in [
        ("start", json!(start)),
        ("end", json!(end)),
        ("seconds", json!(seconds)),
        ("bytes", json!(bytes)),
        ("bits_per_second", json!(rate)),
    ] {
        m.insert(key.into(), value);
    }
    m.insert("sender".into(), json!(sender));
    m
}

/// Our intervals as iperf3's: one entry per interval of our window (which starts after the
/// client's omitted seconds), each stream's bytes, and the sum of each direction (`sum` the
/// client's forward one, or ours alone with `-R`; `sum_bidir_reverse` ours with `--bidir`).
fn intervals(p: &Params, received: Option<&SideReport>, sent: Option<&SideReport>) -> Vec<Value> {
    let omit = p.omit as f64;
    let count = received.map_or(0, |s| s.intervals.len()).max(sent.map_or(0, |s| s.intervals.len()));
    let udp = p.proto == DataProto::Udp;
    (0..count)
        .map(|i| {
            let mut streams = Vec::new();
            let mut entry = Map::new();
            for (side, sender) in [(received, false), (sent, true)] {
                let Some(iv) = side.and_then(|s| s.intervals.get(i)) else { continue };
                let (start, end) = (omit + iv.start, omit + iv.end);
                for (flow, bytes) in iv.bytes.iter().enumerate().take(p.parallel as usize) {
                    let mut stream = span(start, end, *bytes, sender);
                    stream.insert("omitted".into(), json!(false));
                    if sender && !udp {
                        tcp_sender_interval(&mut stream, iv, flow);
                    }
                    streams.push(Value::Object(stream));
                }
                let mut sum = span(start, end, iv.bytes.iter().sum(), sender);
                sum.insert("omitted".into(), json!(false));
                if let Some(u) = iv.udp.as_ref().filter(|_| !sender) {
                    let lost_percent = if u.expected > 0 { 100.0 * u.lost as f64 / u.expected as f64 } else { 0.0 };
                    sum.insert("jitter_ms".into(), json!(u.jitter_us / 1000.0));
                    sum.insert("lost_packets".into(), json!(u.lost));
                    sum.insert("packets".into(), json!(u.expected));
                    sum.insert("lost_percent".into(), json!(lost_percent));
                }
                if sender && !udp && !iv.tcp_retransmits.is_empty() {
                    sum.insert(
                        "retransmits".into(),
                        json!(iv.tcp_retransmits.iter().map(|&r| u64::from(r)).sum::<u64>()),
                    );
                }
                let key = if sender && received.is_some() { "sum_bidir_reverse" } else { "sum" };
                entry.insert(key.into(), Value::Object(sum));
            }
            entry.insert("streams".into(), Value::Array(streams));
            Value::Object(entry)
        })
        .collect()
}

/// A TCP stream we sent, at an interval's end: its retransmits in the interval, and its
/// TCP_INFO (congestion window in bytes, the peer's window, RTT), as iperf3's sender has.
fn tcp_sender_interval(stream: &mut Map<String, Value>, iv: &IntervalFigures, flow: usize) {
    if let Some(r) = iv.tcp_retransmits.get(flow) {
        stream.insert("retransmits".into(), json!(r));
    }
    if let Some(Some(info)) = iv.tcp_flows.get(flow) {
        stream.insert("snd_cwnd".into(), json!(u64::from(info.cwnd) * u64::from(info.snd_mss)));
        stream.insert("snd_wnd".into(), json!(info.snd_wnd));
        stream.insert("rtt".into(), json!(info.rtt_us));
        stream.insert("rttvar".into(), json!(info.rttvar_us));
        if let Some(reorder) = info.reord_seen {
            stream.insert("reorder".into(), json!(reorder));
        }
    }
}

/// The end: each stream as the results we give the client say it (`receiver` for one we
/// received, `sender` for one we sent, `udp` for a UDP stream), and each direction's sum.
fn end_section(p: &Params, ours: &Results, [received, sent]: [Option<&SideReport>; 2]) -> Value {
    let udp = p.proto == DataProto::Udp;
    let receives = !p.reverse || p.bidirectional;
    let n = p.parallel as usize;
    let mut streams = Vec::new();
    let (mut rx, mut tx): (Vec<&StreamResult>, Vec<&StreamResult>) = (Vec::new(), Vec::new());
    for (i, s) in ours.streams.iter().enumerate() {
        let sender = !receives || i >= n;
        let mut m = span(s.start_s, s.end_s, s.bytes, sender);
        if udp && !sender {
            udp_receiver_figures(&mut m, s.jitter_s, s.errors, s.packets);
        } else if udp {
            m.insert("packets".into(), json!(s.packets));
        } else if sender {
            if let Some(r) = s.retransmits {
                m.insert("retransmits".into(), json!(r));
            }
            let info = sent.and_then(|side| side.tcp_flows_end.get(i.saturating_sub(if receives { n } else { 0 })));
            if let Some(reorder) = info.and_then(|f| f.as_ref()).and_then(|f| f.reord_seen) {
                m.insert("reorder".into(), json!(reorder));
            }
        }
        let key = if udp {
            "udp"
        } else if sender {
            "sender"
        } else {
            "receiver"
        };
        streams.push(json!({ key: Value::Object(m) }));
        if sender {
            tx.push(s);
        } else {
            rx.push(s);
        }
    }
    let mut end = Map::new();
    end.insert("streams".into(), Value::Array(streams));
    if !rx.is_empty() {
        let mut sum = sum_of(&rx, false);
        if udp {
            let jitter = rx.iter().map(|s| s.jitter_s).sum::<f64>() / rx.len() as f64;
            udp_receiver_figures(
                &mut sum,
                jitter,
                rx.iter().map(|s| s.errors).sum(),
                rx.iter().map(|s| s.packets).sum(),
            );
            end.insert("sum".into(), Value::Object(sum.clone()));
        }
        end.insert("sum_received".into(), Value::Object(sum));
    }
    if !tx.is_empty() {
        let mut sum = sum_of(&tx, true);
        if udp {
            sum.insert("packets".into(), json!(tx.iter().map(|s| s.packets).sum::<u64>()));
            if rx.is_empty() {
                end.insert("sum".into(), Value::Object(sum.clone()));
            }
        } else if tx.iter().all(|s| s.retransmits.is_some()) {
            sum.insert("retransmits".into(), json!(tx.iter().filter_map(|s| s.retransmits).sum::<u64>()));
        }
        let key = if rx.is_empty() { "sum_sent" } else { "sum_sent_bidir_reverse" };
        end.insert(key.into(), Value::Object(sum));
    }
    // Our threads' CPU, as the results give it the client, where our loops measured it.
    if [received, sent].iter().flatten().any(|side| !side.cpu.threads.is_empty()) {
        let [total, user, system] = ours.cpu_util;
        let cpu = json!({ "host_total": total, "host_user": user, "host_system": system });
        end.insert("cpu_utilization_percent".into(), cpu);
    }
    Value::Object(end)
}

/// The streams' bytes over the longest of their spans.
fn sum_of(streams: &[&StreamResult], sender: bool) -> Map<String, Value> {
    let start = streams.iter().map(|s| s.start_s).fold(f64::INFINITY, f64::min);
    let end = streams.iter().map(|s| s.end_s).fold(0.0, f64::max);
    span(if start.is_finite() { start } else { 0.0 }, end, streams.iter().map(|s| s.bytes).sum(), sender)
}

/// A UDP receiver's accounting: jitter, datagrams lost of those the sender's sequence
/// numbers say it sent (`packets`), and the share lost.
fn udp_receiver_figures(m: &mut Map<String, Value>, jitter_s: f64, lost: u64, packets: u64) {
    let lost_percent = if packets > 0 { 100.0 * lost as f64 / packets as f64 } else { 0.0 };
    m.insert("jitter_ms".into(), json!(jitter_s * 1000.0));
    m.insert("lost_packets".into(), json!(lost));
    m.insert("packets".into(), json!(packets));
    m.insert("lost_percent".into(), json!(lost_percent));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(bytes: u64, retransmits: Option<u64>, (jitter_s, errors, packets): (f64, u64, u64)) -> StreamResult {
        StreamResult { id: 1, bytes, retransmits, jitter_s, errors, packets, start_s: 0.0, end_s: 2.0 }
    }

    #[test]
    fn each_direction_is_summed_under_iperf3s_key_and_nothing_we_did_not_carry() {
        let summary = Iperf3TestSummary { started_unix_ms: Some(1_796_528_143_845), ..Default::default() };
        // --bidir over TCP, one stream each way: ours received 1000 bytes, sent 500.
        let p = Params { bidirectional: true, ..Params::default() };
        let ours = Results {
            streams: vec![stream(1000, None, (0.0, 0, 0)), stream(500, Some(3), (0.0, 0, 0))],
            ..Default::default()
        };
        let doc = summary.server_document(&p, &ours);
        assert_eq!(doc["end"]["sum_received"]["bytes"], 1000);
        assert_eq!(doc["end"]["sum_sent_bidir_reverse"]["bytes"], 500);
        assert_eq!(doc["end"]["sum_sent_bidir_reverse"]["retransmits"], 3);
        assert_eq!(doc["end"]["streams"][0]["receiver"]["bits_per_second"], 4000.0);
        assert_eq!(doc["end"]["streams"][1]["sender"]["sender"], true);
        assert!(doc["end"].get("sum_sent").is_none() && doc["end"].get("cpu_utilization_percent").is_none(), "{doc}");
        let stamp = &doc["start"]["timestamp"];
        assert_eq!(
            (stamp["timesecs"].as_u64(), stamp["timemillisecs"].as_u64()),
            (Some(1_796_528_143), Some(1_796_528_143_845))
        );
        assert_eq!(stamp["time"], "Sun, 06 Dec 2026 03:35:43 GMT");
        assert_eq!(doc["start"]["test_start"]["bidir"], 1);
        assert_eq!(doc["intervals"], json!([]), "no report: no intervals, none made up");
        // -u: what we received, per stream and summed: jitter, lost of the highest number seen.
        let p = Params { proto: DataProto::Udp, parallel: 2, ..Params::default() };
        let ours = Results {
            streams: vec![stream(1400 * 90, None, (0.002, 10, 100)), stream(1400 * 100, None, (0.004, 0, 100))],
            ..Default::default()
        };
        let end = &summary.server_document(&p, &ours)["end"];
        assert_eq!((end["sum"]["lost_packets"].as_u64(), end["sum"]["packets"].as_u64()), (Some(10), Some(200)));
        assert_eq!(end["sum"]["lost_percent"], 5.0);
        assert!((end["sum"]["jitter_ms"].as_f64().unwrap() - 3.0).abs() < 1e-9, "the streams' mean, as iperf3's");
        assert_eq!(end["streams"][0]["udp"]["lost_packets"], 10);
        assert_eq!(end["sum_received"], end["sum"]);
        assert!(end.get("sum_sent").is_none(), "{end}");
    }
}
