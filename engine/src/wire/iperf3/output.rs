//! What an iperf3 server's own JSON output says beyond its results: a server run with `-J`
//! sends its whole document to a client that asked for it (`--get-server-output`) as
//! `server_output_json`. Three facts there are nowhere else on the wire: when the test started
//! to the millisecond (`start.timestamp.timemillisecs`, 3.20+; `timesecs` before), whether the
//! server's UDP sockets took GSO and GRO (`start.test_start.gso`/`gro`, 3.21+, 0 when the
//! kernel refused the option), and how many reordering events the kernel's TCP saw on each
//! stream the server sent (`end.streams[].sender.reorder`, 3.20+, Linux's `tcpi_reord_seen`).
//! The results exchange itself carries none of them.

use super::{whole, MAX_STREAMS};
use serde_json::Value;

/// What [`ServerOutputFacts::read`] found; `None` wherever the server did not say (an older
/// iperf3, a key of the wrong type, -1 for "unknown").
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerOutputFacts {
    /// When the server's test started, milliseconds since the Unix epoch (3.20+).
    pub start_ms: Option<u64>,
    /// The same in whole seconds (every version).
    pub start_s: Option<u64>,
    /// Whether the server's UDP sockets took GSO and GRO (3.21+).
    pub gso: Option<bool>,
    pub gro: Option<bool>,
    /// Per stream in connection order (iperf3 ids 1, 3, 4, ...), for a stream the server
    /// sent on over TCP: the reordering events its kernel saw (3.20+).
    pub reorder: Vec<Option<u64>>,
}

impl ServerOutputFacts {
    /// Reads the facts from a server's `server_output_json` (the caller bounded its size).
    pub fn read(doc: &Value) -> ServerOutputFacts {
        let at = |path: &str| doc.pointer(path).and_then(whole);
        let switch = |path: &str| at(path).filter(|n| *n <= 1).map(|n| n == 1);
        let streams = doc.pointer("/end/streams").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let reorder = streams
            .iter()
            .take(2 * MAX_STREAMS as usize)
            .map(|s| {
                let sent = s.pointer("/sender/sender").and_then(Value::as_bool) == Some(true);
                s.pointer("/sender/reorder").and_then(whole).filter(|_| sent)
            })
            .collect();
        ServerOutputFacts {
            start_ms: at("/start/timestamp/timemillisecs"),
            start_s: at("/start/timestamp/timesecs"),
            gso: switch("/start/test_start/gso"),
            gro: switch("/start/test_start/gro"),
            reorder,
        }
    }

    /// Whether the server said anything beyond what every version says.
    pub fn any(&self) -> bool {
        self.start_ms.is_some() || self.gso.is_some() || self.gro.is_some() || self.reorder.iter().any(Option::is_some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `iperf3 -s -J` (3.21+, built from upstream source) answering `iperf3 -c 127.0.0.1 -t 1
    /// -R --get-server-output`: its `server_output_json` as the client received it (`-d`),
    /// intervals left out.
    const SERVER_JSON_3_21_TCP_REVERSE: &str = r#"{"start":{"connected":[{"socket":5,"local_host":"127.0.0.1","local_port":15232,"remote_host":"127.0.0.1","remote_port":55698}],"version":"iperf 3.21+","system_info":"Linux vm 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0 x86_64","sock_bufsize":0,"sndbuf_actual":16384,"rcvbuf_actual":131072,"timestamp":{"time":"Sat, 05 Dec 2026 23:56:41 GMT","timesecs":1796515001,"timemillisecs":1796515001654},"accepted_connection":{"host":"127.0.0.1","port":55686},"cookie":"qq4xondygbcyoxldeahvt4duznpbvy4o6fxh","tcp_mss_default":0,"target_bitrate":0,"fq_rate":0,"test_start":{"protocol":"TCP","num_streams":1,"blksize":131072,"omit":0,"duration":1,"bytes":0,"blocks":0,"reverse":1,"tos":0,"target_bitrate":0,"bidir":0,"fqrate":0,"interval":1,"gso":0,"gro":0}},"end":{"streams":[{"sender":{"socket":5,"start":0,"end":1.007255,"seconds":1.007255,"bytes":1843134464,"bits_per_second":14638870705.034971,"retransmits":18,"reorder":14,"max_snd_cwnd":2095456,"max_snd_wnd":32900096,"max_rtt":112,"min_rtt":112,"mean_rtt":112,"sender":true},"receiver":{"socket":5,"start":0,"end":1.007255,"seconds":1.007255,"bytes":0,"bits_per_second":0,"sender":true}}],"sum_sent":{"start":0,"end":1.007255,"seconds":1.007255,"bytes":1843134464,"bits_per_second":14638870705.034971,"retransmits":18,"sender":true},"cpu_utilization_percent":{"host_total":36.823864155319143,"host_user":0.068204291211475,"host_system":36.7555605856634,"remote_total":0,"remote_user":0,"remote_system":0},"sender_tcp_congestion":"bbr"}}"#;

    /// The same server answering `iperf3 -c 127.0.0.1 -u -t 1 -b 50M --gsro --get-server-output`:
    /// its sockets took GSO and GRO.
    const SERVER_JSON_3_21_UDP_GSRO: &str = r#"{"start":{"version":"iperf 3.21+","timestamp":{"time":"Sat, 05 Dec 2026 23:56:32 GMT","timesecs":1796514992,"timemillisecs":1796514992356},"test_start":{"protocol":"UDP","num_streams":1,"blksize":32768,"omit":0,"duration":1,"bytes":0,"blocks":0,"reverse":0,"tos":0,"target_bitrate":50000000,"bidir":0,"fqrate":0,"interval":1,"gso":1,"gro":1}},"end":{"streams":[{"udp":{"socket":5,"start":0,"end":1.009214,"seconds":1.009214,"bytes":0,"bits_per_second":0,"jitter_ms":1.274489092834868,"lost_packets":0,"packets":191,"lost_percent":0,"out_of_order":0,"sender":false}}],"sum_received":{"start":0,"end":1.009214,"seconds":1.009214,"bytes":6258688,"bits_per_second":49612375.571484342,"jitter_ms":1.274489092834868,"lost_packets":0,"packets":191,"lost_percent":0,"sender":false}}}"#;

    /// Debian's `iperf3 -s -J` (3.12) answering `iperf3 -c 127.0.0.1 -t 1 -R
    /// --get-server-output` (3.12): `timesecs` only, no GSO/GRO keys, and no reorder on the
    /// stream it sent (connection details, intervals and sums left out).
    const SERVER_JSON_3_12_TCP_REVERSE: &str = r#"{"start":{"version":"iperf 3.12","sock_bufsize":0,"sndbuf_actual":16384,"rcvbuf_actual":131072,"timestamp":{"time":"Sat, 05 Dec 2026 23:58:45 GMT","timesecs":1796515125},"tcp_mss_default":0,"target_bitrate":0,"test_start":{"protocol":"TCP","num_streams":1,"blksize":131072,"omit":0,"duration":1,"bytes":0,"blocks":0,"reverse":1,"tos":0,"target_bitrate":0}},"end":{"streams":[{"sender":{"socket":5,"start":0,"end":1.000886,"seconds":1.000886,"bytes":1191444480,"bits_per_second":9523118357.13558,"retransmits":5,"max_snd_cwnd":1833524,"max_snd_wnd":24067072,"max_rtt":288,"min_rtt":288,"mean_rtt":288,"sender":true},"receiver":{"socket":5,"start":0,"end":1.000886,"seconds":1.000886,"bytes":0,"bits_per_second":0,"sender":true}}],"sender_tcp_congestion":"bbr"}}"#;

    fn facts(text: &str) -> ServerOutputFacts {
        ServerOutputFacts::read(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn a_3_21_server_says_its_start_in_ms_its_gso_gro_and_each_sent_streams_reorder() {
        let tcp = facts(SERVER_JSON_3_21_TCP_REVERSE);
        assert_eq!((tcp.start_ms, tcp.start_s), (Some(1_796_515_001_654), Some(1_796_515_001)));
        assert_eq!((tcp.gso, tcp.gro), (Some(false), Some(false)));
        assert_eq!(tcp.reorder, vec![Some(14)], "the stream it sent");
        assert!(tcp.any());
        let udp = facts(SERVER_JSON_3_21_UDP_GSRO);
        assert_eq!((udp.gso, udp.gro, udp.start_ms), (Some(true), Some(true), Some(1_796_514_992_356)));
        assert_eq!(udp.reorder, vec![None], "UDP has no TCP reordering");
    }

    #[test]
    fn an_older_server_says_none_of_it_and_nonsense_is_none() {
        let old = facts(SERVER_JSON_3_12_TCP_REVERSE);
        assert_eq!((old.start_ms, old.start_s, old.gso, old.gro), (None, Some(1_796_515_125), None, None));
        assert_eq!(old.reorder, vec![None], "no reorder before 3.20, even on a stream it sent");
        assert!(!old.any());
        // -1 ("unknown"), a reorder on a stream it did not send, a switch out of 0..=1,
        // a document of another shape.
        let odd =
            SERVER_JSON_3_21_TCP_REVERSE.replace("\"reorder\":14", "\"reorder\":-1").replace("\"gro\":0", "\"gro\":7");
        let odd = facts(&odd);
        assert_eq!((odd.reorder.clone(), odd.gro), (vec![None], None));
        let received = SERVER_JSON_3_21_TCP_REVERSE
            .replace("\"mean_rtt\":112,\"sender\":true", "\"mean_rtt\":112,\"sender\":false");
        assert_eq!(facts(&received).reorder, vec![None]);
        assert_eq!(facts("[1,2]"), ServerOutputFacts::default());
        let many = format!(r#"{{"end":{{"streams":[{}]}}}}"#, vec!["{}"; 1000].join(","));
        assert_eq!(facts(&many).reorder.len(), 2 * MAX_STREAMS as usize, "bounded");
    }
}
