//! Which cloud the host runs in, and what the vendor says its egress is capped at.
//!
//! On a cloud VM the first bottleneck is often neither CPU nor NIC but the vendor's meter: a
//! GCP VM gets about 2 Gbps per vCPU, an AWS flow 5 Gbps outside a cluster placement group
//! (vendor documentation, cited per figure in the data file). The verdict can only say "you hit the cloud's cap" if it knows the cloud and
//! the figure. The cloud comes from the DMI strings the hypervisor sets (readable without
//! root and without the metadata service, which tests may not reach); the figures live in
//! `engine/data/cloud-egress.json`, with their sources, so they can be corrected without
//! touching code.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};

/// The built-in vendor figures.
const BUILTIN_JSON: &str = include_str!("../../../data/cloud-egress.json");
const DMI_DIR: &str = "/sys/class/dmi/id";
/// Azure sets this chassis asset tag on every VM (it is "MSFT AZURE VM" in ASCII codes); a
/// Hyper-V guest outside Azure has the same vendor and product strings but not the tag.
const AZURE_ASSET_TAG: &str = "7783-7084-3265-9085-8269-3286-77";

/// A cloud whose egress rules we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Cloud {
    Gcp,
    Aws,
    Azure,
}

impl Cloud {
    /// The key of this cloud in the egress table.
    pub fn key(self) -> &'static str {
        match self {
            Cloud::Gcp => "gcp",
            Cloud::Aws => "aws",
            Cloud::Azure => "azure",
        }
    }
}

/// The DMI (SMBIOS) strings that identify a platform, as in /sys/class/dmi/id. Missing
/// files are empty strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Dmi {
    pub sys_vendor: String,
    pub product_name: String,
    pub bios_vendor: String,
    pub bios_version: String,
    pub chassis_asset_tag: String,
}

impl Dmi {
    /// Reads this host's DMI strings; None where the platform exposes none (microVMs such as
    /// Firecracker, many ARM boards, containers without /sys).
    pub fn read() -> Option<Self> {
        Self::read_from(Path::new(DMI_DIR))
    }

    /// Reads the DMI strings from a directory laid out like /sys/class/dmi/id.
    pub(crate) fn read_from(dir: &Path) -> Option<Self> {
        if !dir.is_dir() {
            return None;
        }
        let get = |name: &str| fs::read_to_string(dir.join(name)).map(|s| s.trim().to_owned()).unwrap_or_default();
        Some(Self {
            sys_vendor: get("sys_vendor"),
            product_name: get("product_name"),
            bios_vendor: get("bios_vendor"),
            bios_version: get("bios_version"),
            chassis_asset_tag: get("chassis_asset_tag"),
        })
    }
}

/// The cloud these DMI strings belong to, if one we know.
pub(crate) fn detect(dmi: &Dmi) -> Option<Cloud> {
    let has = |field: &str, needle: &str| field.to_ascii_lowercase().contains(needle);
    if dmi.sys_vendor.trim() == "Google" || dmi.product_name.trim() == "Google Compute Engine" {
        return Some(Cloud::Gcp);
    }
    // Nitro: "Amazon EC2" everywhere; older Xen instances: vendor "Xen", bios_version
    // "4.11.amazon".
    if has(&dmi.sys_vendor, "amazon") || has(&dmi.bios_vendor, "amazon") || has(&dmi.bios_version, "amazon") {
        return Some(Cloud::Aws);
    }
    if dmi.chassis_asset_tag.trim() == AZURE_ASSET_TAG {
        return Some(Cloud::Azure);
    }
    None
}

/// The instance type of an AWS Nitro instance (its DMI product name, e.g. `m6i.large`),
/// which decides its bandwidth; None elsewhere.
#[cfg(test)]
pub(crate) fn aws_instance_type(dmi: &Dmi) -> Option<&str> {
    let p = dmi.product_name.trim();
    (dmi.sys_vendor.trim() == "Amazon EC2" && p.contains('.')).then_some(p)
}

/// The number of online CPUs (vCPUs on a VM), from /sys/devices/system/cpu/online.
pub(crate) fn online_cpus() -> Option<u32> {
    let list = fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    crate::base::units::parse_cpu_list(&list).ok().map(|cpus| cpus.len() as u32)
}

/// What a vendor says about a VM's egress, for the verdict to compare with.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct EgressCap {
    /// The VM-wide egress cap in Gbit/s, when it follows from the vCPU count; None when it
    /// depends on the instance type or size (AWS, Azure).
    pub gbps: Option<f64>,
    /// The most one flow gets, when the vendor limits flows.
    pub per_flow_gbps: Option<f64>,
    /// Where the figures come from.
    pub source: String,
    /// What else matters (how to raise the cap, which counters show it biting).
    pub note: String,
}

/// One cloud's entry in the egress table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloudEgress {
    pub name: String,
    pub per_vcpu_gbps: Option<f64>,
    pub max_gbps: Option<f64>,
    pub per_flow_gbps: Option<f64>,
    pub source: String,
    pub note: String,
}

/// The vendor figures, as in `engine/data/cloud-egress.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EgressTable {
    pub schema_version: u32,
    #[serde(default)]
    pub about: String,
    pub clouds: BTreeMap<String, CloudEgress>,
}

impl EgressTable {
    /// The table built into the binary.
    pub(crate) fn builtin() -> &'static EgressTable {
        static TABLE: OnceLock<EgressTable> = OnceLock::new();
        // The embedded file is checked by a unit test, so this cannot fail in a tested build.
        TABLE.get_or_init(|| EgressTable::from_json(BUILTIN_JSON).expect("engine/data/cloud-egress.json is valid"))
    }

    /// Parses and checks a table (the built-in one, or a user's corrected copy).
    pub(crate) fn from_json(text: &str) -> Result<Self> {
        let table: EgressTable =
            serde_json::from_str(text).map_err(|e| Error::usage(format!("cloud egress table: {e}")))?;
        if table.schema_version != 1 {
            return Err(Error::usage(format!(
                "cloud egress table: schema_version {} is not supported (expected 1)",
                table.schema_version
            )));
        }
        for (key, c) in &table.clouds {
            for (field, v) in
                [("per_vcpu_gbps", c.per_vcpu_gbps), ("max_gbps", c.max_gbps), ("per_flow_gbps", c.per_flow_gbps)]
            {
                if v.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                    return Err(Error::usage(format!("cloud egress table: {key}.{field} must be a positive number")));
                }
            }
            if c.source.trim().is_empty() {
                return Err(Error::usage(format!("cloud egress table: {key} has no source for its figures")));
            }
        }
        Ok(table)
    }

    /// The egress figures for `cloud` on a VM with `vcpus` vCPUs; None if the table has no
    /// entry for that cloud. With `vcpus` 0 (unknown) a per-vCPU cloud gives its maximum alone.
    pub(crate) fn egress_cap(&self, cloud: Cloud, vcpus: u32) -> Option<EgressCap> {
        let c = self.clouds.get(cloud.key())?;
        let by_vcpu = c.per_vcpu_gbps.filter(|_| vcpus > 0).map(|per| per * f64::from(vcpus));
        let gbps = match (by_vcpu, c.max_gbps) {
            (Some(v), Some(max)) => Some(v.min(max)),
            (Some(v), None) => Some(v),
            (None, max) => max,
        };
        Some(EgressCap { gbps, per_flow_gbps: c.per_flow_gbps, source: c.source.clone(), note: c.note.clone() })
    }
}

/// [`EgressTable::egress_cap`] on the built-in table.
pub fn egress_cap(cloud: Cloud, vcpus: u32) -> Option<EgressCap> {
    EgressTable::builtin().egress_cap(cloud, vcpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dmi(sys_vendor: &str, product_name: &str, bios_vendor: &str, bios_version: &str, tag: &str) -> Dmi {
        Dmi {
            sys_vendor: sys_vendor.into(),
            product_name: product_name.into(),
            bios_vendor: bios_vendor.into(),
            bios_version: bios_version.into(),
            chassis_asset_tag: tag.into(),
        }
    }

    // DMI strings as these platforms publish them (this test machine, a Firecracker microVM,
    // has no DMI at all; cloud-init's ds-identify and the vendors' docs list the same values).

    #[test]
    fn gcp() {
        let d = dmi("Google", "Google Compute Engine", "Google", "Google", "");
        assert_eq!(detect(&d), Some(Cloud::Gcp));
    }

    #[test]
    fn aws_nitro_and_xen() {
        let nitro = dmi("Amazon EC2", "m6i.large", "Amazon EC2", "1.0", "Amazon EC2");
        assert_eq!(detect(&nitro), Some(Cloud::Aws));
        assert_eq!(aws_instance_type(&nitro), Some("m6i.large"), "Nitro names the instance type");
        let xen = dmi("Xen", "HVM domU", "Xen", "4.11.amazon", "");
        assert_eq!(detect(&xen), Some(Cloud::Aws), "older Xen instances say so in bios_version");
        assert_eq!(aws_instance_type(&xen), None);
    }

    #[test]
    fn azure_needs_its_asset_tag() {
        let azure = dmi(
            "Microsoft Corporation",
            "Virtual Machine",
            "Microsoft Corporation",
            "Hyper-V UEFI Release v4.1",
            AZURE_ASSET_TAG,
        );
        assert_eq!(detect(&azure), Some(Cloud::Azure));
        let hyperv = Dmi { chassis_asset_tag: "None".into(), ..azure };
        assert_eq!(detect(&hyperv), None, "a Hyper-V guest outside Azure has no Azure cap");
    }

    #[test]
    fn other_platforms_are_no_cloud() {
        assert_eq!(
            detect(&dmi("QEMU", "Standard PC (Q35 + ICH9, 2009)", "SeaBIOS", "1.16.3-debian-1.16.3-2", "")),
            None
        );
        assert_eq!(
            detect(&dmi("VMware, Inc.", "VMware Virtual Platform", "Phoenix Technologies LTD", "6.00", "No Asset Tag")),
            None
        );
        assert_eq!(detect(&Dmi::default()), None, "empty strings");
        assert_eq!(detect(&dmi("\u{fffd}\u{0}", "\n", "", "", "")), None, "garbage");
    }

    #[test]
    fn dmi_from_a_directory() {
        let dir = std::env::temp_dir().join(format!("uringbench-dmi-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("sys_vendor"), "Google\n").unwrap();
        fs::write(dir.join("product_name"), "Google Compute Engine\n").unwrap();
        let d = Dmi::read_from(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(d.sys_vendor, "Google", "trailing newline trimmed");
        assert_eq!(d.chassis_asset_tag, "", "a missing file is an empty string");
        assert_eq!(detect(&d), Some(Cloud::Gcp));
        assert_eq!(Dmi::read_from(Path::new("/nonexistent/dmi")), None);
    }

    #[test]
    fn online_cpus_are_counted() {
        // The C library's count, from its own reading of the same kernel state.
        // SAFETY: sysconf has no preconditions.
        let libc_count = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        assert_eq!(online_cpus().map(i64::from), Some(libc_count as i64), "as many as sysconf counts online");
    }

    #[test]
    fn builtin_table_parses_and_cites_sources() {
        let t = EgressTable::from_json(BUILTIN_JSON).expect("the shipped table is valid");
        for cloud in [Cloud::Gcp, Cloud::Aws, Cloud::Azure] {
            let c = t.clouds.get(cloud.key()).unwrap_or_else(|| panic!("{} has an entry", cloud.key()));
            assert!(c.source.contains("https://"), "{} cites a page", cloud.key());
        }
    }

    #[test]
    fn gcp_cap_grows_with_vcpus_up_to_the_default_maximum() {
        assert_eq!(egress_cap(Cloud::Gcp, 2).unwrap().gbps, Some(4.0), "2 Gbps per vCPU");
        assert_eq!(egress_cap(Cloud::Gcp, 8).unwrap().gbps, Some(16.0));
        assert_eq!(egress_cap(Cloud::Gcp, 64).unwrap().gbps, Some(32.0), "capped at the default 32 Gbps");
        assert_eq!(egress_cap(Cloud::Gcp, 0).unwrap().gbps, Some(32.0), "unknown vCPUs: the maximum only");
        assert!(egress_cap(Cloud::Gcp, 64).unwrap().note.contains("Tier_1"), "says how to go higher");
    }

    #[test]
    fn aws_limits_flows_and_azure_meters_per_size() {
        let aws = egress_cap(Cloud::Aws, 4).unwrap();
        assert_eq!((aws.gbps, aws.per_flow_gbps), (None, Some(5.0)), "instance total depends on the type");
        assert!(aws.note.contains("ENA Express") && aws.note.contains("bw_out_allowance_exceeded"));
        let azure = egress_cap(Cloud::Azure, 4).unwrap();
        assert_eq!((azure.gbps, azure.per_flow_gbps), (None, None));
        assert!(azure.note.contains("per VM size"));
    }

    #[test]
    fn bad_tables_are_one_line_errors() {
        let cases = [
            ("{", "cloud egress table: "),
            (r#"{"schema_version": 2, "clouds": {}}"#, "schema_version 2"),
            (
                r#"{"schema_version": 1, "clouds": {"x": {"name": "X", "per_vcpu_gbps": -1, "max_gbps": null, "per_flow_gbps": null, "source": "s", "note": ""}}}"#,
                "x.per_vcpu_gbps",
            ),
            (
                r#"{"schema_version": 1, "clouds": {"x": {"name": "X", "per_vcpu_gbps": null, "max_gbps": null, "per_flow_gbps": null, "source": " ", "note": ""}}}"#,
                "no source",
            ),
            (r#"{"schema_version": 1, "clouds": {}, "typo": 1}"#, "unknown field"),
        ];
        for (text, want) in cases {
            let err = EgressTable::from_json(text).unwrap_err();
            assert!(err.message.contains(want), "{text}: expected {want:?} in {err}");
            assert!(!err.message.contains('\n'), "one line: {err}");
        }
        let custom = EgressTable::from_json(r#"{"schema_version": 1, "clouds": {}}"#).unwrap();
        assert_eq!(custom.egress_cap(Cloud::Gcp, 8), None, "a table without the cloud has no figure");
    }
}
