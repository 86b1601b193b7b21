//! Turns abi_stable's layout-mismatch report, which runs to hundreds of lines
//! of type layouts, into one line naming where the layouts differ and how:
//! `validate, parameter request_len: mismatched type (expected usize, found u32)`.

/// One mismatch abi_stable found.
#[derive(Debug, PartialEq, Eq)]
struct Mismatch {
    /// Where, outermost first: fields, function parameters.
    path: Vec<String>,
    /// abi_stable's description (`mismatched type`, `too many fields`, ...).
    what: String,
    expected: String,
    found: String,
}

/// Summarises an abi_stable `AbiInstability` report in one line. Falls back
/// to the report's first non-empty line when its shape is not recognised.
pub(crate) fn summarise_layout_mismatch(report: &str) -> String {
    let mismatches = parse_report(report);
    if mismatches.is_empty() {
        return report
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("the layouts differ")
            .to_owned();
    }
    mismatches
        .iter()
        .take(3)
        .map(|m| {
            let place = if m.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", m.path.join(", "))
            };
            format!(
                "{place}{} (expected {}, found {})",
                m.what, m.expected, m.found
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn parse_report(report: &str) -> Vec<Mismatch> {
    let mut mismatches = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut param_names: Vec<String> = Vec::new();
    let mut in_stack_trace = false;
    let mut lines = report.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.contains("error(s)") {
            stack.clear();
            param_names.clear();
            in_stack_trace = trimmed.ends_with("inside:");
        } else if trimmed.starts_with("Layout of expected type:") {
            in_stack_trace = false;
        } else if in_stack_trace {
            if let Some(field) = trimmed.strip_prefix("field_name:") {
                stack.push(field.to_owned());
            } else if let Some(params) = trimmed
                .split_once("fn(")
                .and_then(|(_, rest)| rest.split_once(",:"))
            {
                param_names = params.0.split(',').map(str::to_owned).collect();
            }
        } else if let Some(what) = trimmed.strip_prefix("Error:") {
            let mut expected = String::new();
            let mut found = String::new();
            while let Some(next) = lines.peek().map(|l| l.trim()) {
                let slot = if next.starts_with("Expected:") {
                    &mut expected
                } else if next.starts_with("Found:") {
                    &mut found
                } else {
                    break;
                };
                lines.next();
                let inline = next.split_once(':').map(|(_, v)| v.trim()).unwrap_or("");
                *slot = if inline.is_empty() {
                    lines
                        .next()
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                } else {
                    inline.to_owned()
                };
            }
            let mismatch = Mismatch {
                path: readable_path(&stack, &param_names),
                what: what.trim().to_owned(),
                expected,
                found,
            };
            if !mismatches.contains(&mismatch) {
                mismatches.push(mismatch);
            }
        }
    }
    mismatches
}

/// Drops abi_stable's wrapper levels (`0`, `__returns`) and names function
/// parameters (`param_2`) by their declared names where known.
fn readable_path(stack: &[String], param_names: &[String]) -> Vec<String> {
    stack
        .iter()
        .filter(|field| field.as_str() != "0" && field.as_str() != "__returns")
        .map(|field| {
            match field
                .strip_prefix("param_")
                .and_then(|index| index.parse::<usize>().ok())
                .and_then(|index| param_names.get(index))
            {
                Some(name) => format!("parameter {name}"),
                None => field.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
Compared <this>:
    --- Type Layout ---
0 error(s).

1 error(s)inside:
    <other>

    field_name:0
    type:VooduPluginModule

    field_name:vtable_v1
    field_name:__returns
    field_name:validate
    type:Option<AFunctionPointer>
    fn pointer(s):
        unsafe fn(instance,request,request_len,out,: *mut c_void , param_1: *const u8 )->i32

    field_name:param_2
    type:u32

Layout of expected type:
    field_name:should_not_count

Error:mismatched type
Expected:
    usize
Found:
    u32
";

    #[test]
    fn a_parameter_type_change_is_named_by_field_and_parameter() {
        assert_eq!(
            summarise_layout_mismatch(REPORT),
            "vtable_v1, validate, parameter request_len: mismatched type (expected usize, found u32)"
        );
    }

    #[test]
    fn an_unrecognised_report_falls_back_to_its_first_line() {
        assert_eq!(
            summarise_layout_mismatch("\n  something else\nmore"),
            "something else"
        );
    }
}
