//! CPU time of this host and of its processes, read from `/proc` (Linux): how busy the
//! cores were during a run, and which processes kept them busy. Empty elsewhere.

use std::collections::BTreeMap;

/// CPU time so far, in the kernel's clock ticks: the host's (all cores) and each
/// process's (user + system), by pid.
#[derive(Debug, Clone, Default)]
pub(super) struct CpuTimes {
    /// Ticks of every core, idle included.
    total: u64,
    /// Ticks of every core spent idle or waiting for I/O.
    idle: u64,
    /// Ticks of each process, with its command name.
    processes: BTreeMap<u32, (String, u64)>,
}

/// Where the cores' time went between two [`CpuTimes`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct CpuShare {
    /// Busy share of all cores, 0 to 1.
    pub busy: f64,
    /// Share of all cores spent in the processes named `postgres`.
    pub postgres: f64,
    /// Share of all cores spent in the given processes.
    pub ours: f64,
}

impl CpuTimes {
    /// The host's and every process's CPU time now; empty when `/proc` cannot be read.
    pub(super) fn now() -> CpuTimes {
        let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
            return CpuTimes::default();
        };
        let (total, idle) = host_ticks(&stat).unwrap_or_default();
        let mut processes = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                    continue;
                };
                let path = entry.path().join("stat");
                if let Some(p) = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|s| process_ticks(&s))
                {
                    processes.insert(pid, p);
                }
            }
        }
        CpuTimes {
            total,
            idle,
            processes,
        }
    }

    /// Where the time went from `self` to `later`, `ours` being the processes of `pids`.
    /// A process that ended in between is not counted.
    pub(super) fn share_until(&self, later: &CpuTimes, pids: &[u32]) -> CpuShare {
        let total = later.total.saturating_sub(self.total);
        if total == 0 {
            return CpuShare::default();
        }
        let idle = later.idle.saturating_sub(self.idle);
        let spent = |keep: &dyn Fn(u32, &str) -> bool| -> u64 {
            later
                .processes
                .iter()
                .filter(|(pid, (name, _))| keep(**pid, name))
                .map(|(pid, (_, ticks))| {
                    let before = self.processes.get(pid).map_or(0, |(_, t)| *t);
                    ticks.saturating_sub(before)
                })
                .sum()
        };
        let of_all = |ticks: u64| ticks as f64 / total as f64;
        CpuShare {
            busy: of_all(total.saturating_sub(idle)),
            postgres: of_all(spent(&|_, name| name == "postgres")),
            ours: of_all(spent(&|pid, _| pids.contains(&pid))),
        }
    }
}

/// All ticks and idle ticks (idle + iowait) from `/proc/stat`'s `cpu` line.
fn host_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some((ticks.iter().sum(), idle))
}

/// A process's command name and user + system ticks from its `/proc/<pid>/stat`. The
/// name, in parentheses, may hold spaces and parentheses: the fields count from the last
/// `)`.
fn process_ticks(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_of_proc_are_read_by_field() {
        let stat = "cpu  100 5 50 800 40 0 5 0 0 0\ncpu0 50 2 25 400 20 0 3 0 0 0\n";
        assert_eq!(host_ticks(stat), Some((1000, 840)));
        let line = "4242 (post gres) x) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    70 30 0 0 20 0 1 0 100 1000 200";
        assert_eq!(process_ticks(line), Some(("post gres) x".to_owned(), 100)));
    }

    #[test]
    fn shares_count_what_was_spent_between_two_readings() {
        let at = |total, idle, pg: u64, ours: u64| CpuTimes {
            total,
            idle,
            processes: BTreeMap::from([
                (1, ("postgres".to_owned(), pg)),
                (2, ("idem".to_owned(), ours)),
                (3, ("idem".to_owned(), 7)),
            ]),
        };
        let share = at(1_000, 900, 10, 10).share_until(&at(2_000, 1_400, 310, 210), &[2]);
        assert_eq!(
            share,
            CpuShare {
                busy: 0.5,
                postgres: 0.3,
                ours: 0.2
            }
        );
    }
}
