//! What a benchmark reads of a running process from `/proc`: its CPU time, its memory, and which process it is when
//! the harness keeps the handle (a control-plane component) to itself.

/// User + system CPU seconds of a process so far (0 when it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // NB: the command name (field 2) may hold spaces; count fields after its closing parenthesis.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100);
    ticks / hz as f64
}

/// A `/proc/<pid>/status` field counted in KiB (`VmRSS`, `VmHWM`), in MiB; `None` when the process is gone.
pub fn status_mib(pid: u32, field: &str) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
}

/// Resident memory of a process now, MiB (0 when it is gone).
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS").unwrap_or(0.0)
}

/// The process one of whose arguments is exactly `arg`, with its arguments.
pub fn process_with_arg(arg: &str) -> Option<(u32, Vec<String>)> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        args.iter().any(|a| a == arg).then_some((pid, args))
    })
}
