//! `KILN_LOGS=code` logging of compiled kernels.

/// True when `KILN_LOGS` names `code` (or `all`).
pub fn code() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("KILN_LOGS").is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .any(|c| c == "code" || c == "all")
        })
    })
}
