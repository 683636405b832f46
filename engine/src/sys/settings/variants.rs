//! The settings of a variant as an experiment's plan or a `recv --variants` file writes them
//! ([`SettingsSpec`]), the changes they make in order, and the receiver's allowed variants
//! ([`ReceiverVariants`]).

use super::*;

/// The settings of one variant as a plan or a `--variants` file writes them.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsSpec {
    /// `"net.ipv4.tcp_congestion_control" = "cubic"`.
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    /// Kernel files by path: RPS/XPS masks, `/proc/irq/N/smp_affinity_list`...
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// IRQ number to CPU list (`/proc/irq/N/smp_affinity_list`).
    #[serde(default)]
    pub irq_affinity: BTreeMap<String, String>,
    /// Per interface: `mtu`, `features`, `channels`, `rings`, `coalesce`, `qdisc`.
    #[serde(default)]
    pub iface: BTreeMap<String, IfaceSettings>,
    #[serde(default)]
    pub commands: Vec<CommandPair>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IfaceSettings {
    pub mtu: Option<u32>,
    /// `ethtool -K`: `gro = "on"`.
    #[serde(default)]
    pub features: BTreeMap<String, String>,
    /// `ethtool -L`: `combined = 4`.
    #[serde(default)]
    pub channels: BTreeMap<String, u64>,
    /// `ethtool -G`: `rx = 4096`.
    #[serde(default)]
    pub rings: BTreeMap<String, u64>,
    /// `ethtool -C`: `rx-usecs = 50`.
    #[serde(default)]
    pub coalesce: BTreeMap<String, u64>,
    /// Root qdisc: `"tbf rate 2gbit burst 256kb latency 10ms"`, `"fq"`.
    pub qdisc: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandPair {
    pub apply: String,
    pub revert: String,
}

impl SettingsSpec {
    pub fn is_empty(&self) -> bool {
        self.changes().map(|c| c.is_empty()).unwrap_or(false)
    }

    /// The changes in the order they are made (reverted in the opposite order): kernel files,
    /// then per interface MTU, offloads, channels, rings, coalescing and qdisc, then commands.
    pub fn changes(&self) -> Result<Vec<Change>> {
        let mut out = Vec::new();
        for (name, value) in &self.sysctl {
            out.push(Change::sysctl(name, value)?);
        }
        for (path, value) in &self.files {
            out.push(Change::File { path: path.clone(), value: value.clone() });
        }
        for (irq, cpus) in &self.irq_affinity {
            if irq.parse::<u32>().is_err() {
                return Err(Error::usage(format!("irq_affinity: '{irq}' is not an IRQ number")));
            }
            out.push(Change::File { path: format!("/proc/irq/{irq}/smp_affinity_list"), value: cpus.clone() });
        }
        for (iface, s) in &self.iface {
            if let Some(mtu) = s.mtu {
                out.push(Change::Mtu { iface: iface.clone(), mtu });
            }
            for (feature, value) in &s.features {
                out.push(Change::EthtoolFeature {
                    iface: iface.clone(),
                    feature: feature.clone(),
                    value: value.clone(),
                });
            }
            for (flag, map) in [('l', &s.channels), ('g', &s.rings), ('c', &s.coalesce)] {
                for (name, value) in map {
                    out.push(Change::EthtoolParam {
                        iface: iface.clone(),
                        flag,
                        name: name.clone(),
                        value: value.to_string(),
                    });
                }
            }
            if let Some(spec) = &s.qdisc {
                out.push(Change::Qdisc { iface: iface.clone(), spec: spec.clone() });
            }
        }
        for c in &self.commands {
            out.push(Change::Command { apply: c.apply.clone(), revert: c.revert.clone() });
        }
        for c in &out {
            c.validate()?;
        }
        Ok(out)
    }
}

/// A variant name as a plan or `recv --variants` file may give it.
pub(crate) fn valid_variant_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// `recv --variants FILE`: the receiver-side variants this receiver allows, each a name and
/// its settings. A sender may ask for one by name; anything else is refused.
#[derive(Debug, Clone, Default)]
pub struct ReceiverVariants {
    pub path: String,
    variants: BTreeMap<String, Vec<Change>>,
}

impl ReceiverVariants {
    /// Reads a file of `[NAME]` tables, each with the settings of [`SettingsSpec`].
    pub fn load(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Error::usage(format!("--variants {shown}: {e}")))?;
        Self::parse(&shown, &text)
    }

    pub fn parse(path: &str, text: &str) -> Result<Self> {
        let specs: BTreeMap<String, SettingsSpec> =
            toml::from_str(text).map_err(|e| Error::usage(format!("--variants {path}: {}", e.message())))?;
        let mut variants = BTreeMap::new();
        for (name, spec) in specs {
            if !valid_variant_name(&name) {
                return Err(Error::usage(format!(
                    "--variants {path}: bad variant name '{name}' (letters, digits, . _ -)"
                )));
            }
            let changes =
                spec.changes().map_err(|e| Error::usage(format!("--variants {path}: {name}: {}", e.message)))?;
            variants.insert(name, changes);
        }
        if variants.is_empty() {
            return Err(Error::usage(format!("--variants {path}: no variant in the file")));
        }
        Ok(Self { path: path.to_owned(), variants })
    }

    pub fn names(&self) -> Vec<&str> {
        self.variants.keys().map(String::as_str).collect()
    }

    /// The changes of variant `name`, or the reason it is refused.
    pub fn get(&self, name: &str) -> std::result::Result<&[Change], String> {
        self.variants.get(name).map(Vec::as_slice).ok_or_else(|| {
            format!(
                "receiver variant '{name}' is not one this receiver allows (recv --variants {}: {})",
                self.path,
                self.names().join(", ")
            )
        })
    }
}
