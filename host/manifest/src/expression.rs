//! One HCL expression to JSON, exactly or not at all.
//!
//! hcl-rs evaluates expressions, but it changes numbers without a word: a
//! literal beyond `u64` becomes a float, `1e-400` becomes 0, `1/0` becomes
//! `null`, and integer overflow or `% 0` panics. This module checks every
//! number literal and every arithmetic operation before hcl-rs sees them, so
//! a value reaches a plugin as written or the apply is refused at the
//! expression that cannot be carried, with the reason.
//!
//! The range a plugin can rely on:
//! - integers from -9223372036854775808 (-2^63) to 18446744073709551615
//!   (2^64 - 1), exactly;
//! - every other number as an IEEE 754 double, written with the shortest
//!   digits that read back to the same double; a literal whose decimal value
//!   is not exactly that double's (too many digits, below the smallest
//!   double, above the largest) is refused;
//! - arithmetic on integers is exact; division, and arithmetic with a
//!   fraction, are done in doubles, as HCL does; a result that is not finite
//!   (division by zero, overflow) is refused.

use std::collections::HashMap;

use hcl::eval::{Context, Evaluate};
use hcl_edit::expr::{BinaryOp, BinaryOperator, Expression, ForExpr, Object, ObjectKey, UnaryOp};
use hcl_edit::visit::{self, Visit};
use hcl_edit::{Formatted, Number, Span};
use serde_json::Value;

/// The smallest integer carried exactly.
pub const MIN_EXACT_INTEGER: i128 = i64::MIN as i128;
/// The largest integer carried exactly.
pub const MAX_EXACT_INTEGER: i128 = u64::MAX as i128;

/// Why arithmetic inside a `for` body is refused.
const FOR_ARITHMETIC: &str = "arithmetic on a `for` variable cannot be checked for exactness before it runs — compute the values and write them as literals";

/// Why an expression cannot reach a plugin, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpressionProblem {
    /// Byte offset in the file of the part of the expression at fault.
    pub offset: usize,
    /// What is wrong and how to write it instead.
    pub message: String,
}

/// Evaluates one expression (no variables or functions are in scope) into
/// JSON, refusing any number that would not arrive exactly as written.
/// `text` is the whole file the expression was parsed from, so literals can
/// be read as written.
pub fn evaluate_exact(expression: &Expression, text: &str) -> Result<Value, ExpressionProblem> {
    let whole = expression.span().map_or(0, |span| span.start);
    let mut checker = Checker {
        text,
        problem: None,
        for_depth: 0,
    };
    checker.visit_expr(expression);
    if let Some(problem) = checker.problem {
        return Err(problem);
    }
    let converted: hcl::Expression = expression.clone().into();
    // A panic inside hcl-rs (integer overflow inside a `for` body, which
    // cannot be checked before its variables are bound) must not take the
    // controller down: it refuses the expression instead.
    let evaluated =
        std::panic::catch_unwind(move || converted.evaluate(&Context::new())).map_err(|_| {
            ExpressionProblem {
                offset: whole,
                message: "cannot be evaluated: its arithmetic overflows — compute the value and write it as a literal".into(),
            }
        })?;
    let value = evaluated.map_err(|error| ExpressionProblem {
        offset: first_unbound_name(expression).unwrap_or(whole),
        message: format!("cannot be evaluated: {}", one_line(&error.to_string())),
    })?;
    if let Some(number) = first_non_finite(&value) {
        return Err(ExpressionProblem {
            offset: whole,
            message: format!(
                "evaluates to {number}, which no JSON number can hold — write a finite number"
            ),
        });
    }
    serde_json::to_value(value).map_err(|error| ExpressionProblem {
        offset: whole,
        message: format!("has no JSON form: {error}"),
    })
}

/// The text as one line, for error messages.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A number as exact arithmetic sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Exact {
    Integer(i128),
    Float(f64),
}

impl Exact {
    fn of(number: &hcl::Number) -> Exact {
        if let Some(unsigned) = number.as_u64() {
            Exact::Integer(i128::from(unsigned))
        } else if let Some(signed) = number.as_i64() {
            Exact::Integer(i128::from(signed))
        } else {
            Exact::Float(number.as_f64().unwrap_or(f64::NAN))
        }
    }

    fn is_zero(self) -> bool {
        match self {
            Exact::Integer(value) => value == 0,
            Exact::Float(value) => value == 0.0,
        }
    }
}

fn in_exact_range(value: i128) -> bool {
    (MIN_EXACT_INTEGER..=MAX_EXACT_INTEGER).contains(&value)
}

fn out_of_range(value: i128) -> String {
    format!(
        "its result, {value}, is outside the integers voodu carries exactly ({MIN_EXACT_INTEGER} to {MAX_EXACT_INTEGER}) — write the value as a string if the plugin takes larger numbers"
    )
}

/// Walks an expression and keeps the first problem found.
struct Checker<'t> {
    text: &'t str,
    problem: Option<ExpressionProblem>,
    /// How many `for` expressions enclose the node being checked.
    for_depth: usize,
}

impl Checker<'_> {
    fn report(&mut self, span: Option<std::ops::Range<usize>>, message: String) {
        if self.problem.is_none() {
            self.problem = Some(ExpressionProblem {
                offset: span.map_or(0, |span| span.start),
                message,
            });
        }
    }

    /// The value of a sub-expression, when it stands alone (no `for`
    /// variable in it).
    fn value_of(expression: &Expression) -> Option<hcl::Value> {
        let converted: hcl::Expression = expression.clone().into();
        std::panic::catch_unwind(move || converted.evaluate(&Context::new()).ok())
            .ok()
            .flatten()
    }

    fn check_binary(&mut self, op: &BinaryOp) {
        use BinaryOperator::{Div, Minus, Mod, Mul, Plus};
        let operator = *op.operator.value();
        if !matches!(operator, Plus | Minus | Mul | Div | Mod) {
            return;
        }
        let (lhs, rhs) = (Self::value_of(&op.lhs_expr), Self::value_of(&op.rhs_expr));
        if self.for_depth > 0 && (lhs.is_none() || rhs.is_none()) {
            self.report(op.span(), FOR_ARITHMETIC.into());
            return;
        }
        let (Some(hcl::Value::Number(lhs)), Some(hcl::Value::Number(rhs))) = (lhs, rhs) else {
            return;
        };
        let (lhs, rhs) = (Exact::of(&lhs), Exact::of(&rhs));
        let span = op.span();
        if matches!(operator, Div | Mod) && rhs.is_zero() {
            let what = if operator == Div {
                "division"
            } else {
                "remainder"
            };
            self.report(
                span,
                format!("{what} by zero has no value that JSON can hold — change the divisor"),
            );
            return;
        }
        let exact = match (lhs, rhs) {
            (Exact::Integer(a), Exact::Integer(b)) => match operator {
                Plus => a.checked_add(b),
                Minus => a.checked_sub(b),
                Mul => a.checked_mul(b),
                Mod => a.checked_rem(b),
                // Only a whole quotient has an exact integer to compare.
                _ => (a % b == 0).then(|| a / b),
            }
            .map(Exact::Integer),
            (a, b) => {
                let (a, b) = (to_f64(a), to_f64(b));
                let result = match operator {
                    Plus => a + b,
                    Minus => a - b,
                    Mul => a * b,
                    Div => a / b,
                    _ => a % b,
                };
                if !result.is_finite() {
                    self.report(
                        span,
                        "its result overflows a 64-bit float, so no JSON number can hold it — write a smaller number".into(),
                    );
                    return;
                }
                None
            }
        };
        let Some(Exact::Integer(exact)) = exact else {
            if matches!((lhs, rhs), (Exact::Integer(_), Exact::Integer(_))) && operator != Div {
                self.report(span, "its result is beyond any integer voodu carries exactly — write the value as a string if the plugin takes larger numbers".into());
            }
            return;
        };
        if !in_exact_range(exact) {
            self.report(span, out_of_range(exact));
            return;
        }
        self.compare_with_hcl(&Expression::from(op.clone()), exact, span);
    }

    fn check_unary(&mut self, op: &UnaryOp) {
        if *op.operator.value() != hcl_edit::expr::UnaryOperator::Neg {
            return;
        }
        let operand = Self::value_of(&op.expr);
        if self.for_depth > 0 && operand.is_none() {
            self.report(op.span(), FOR_ARITHMETIC.into());
            return;
        }
        let Some(hcl::Value::Number(operand)) = operand else {
            return;
        };
        if let Exact::Integer(value) = Exact::of(&operand) {
            let negated = -value;
            if !in_exact_range(negated) {
                self.report(op.span(), out_of_range(negated));
                return;
            }
            self.compare_with_hcl(&Expression::from(op.clone()), negated, op.span());
        }
    }

    /// hcl-rs computes integers of mixed signs in doubles: refuse a result
    /// it would round.
    fn compare_with_hcl(
        &mut self,
        expression: &Expression,
        exact: i128,
        span: Option<std::ops::Range<usize>>,
    ) {
        let Some(hcl::Value::Number(computed)) = Self::value_of(expression) else {
            return;
        };
        if Exact::of(&computed) != Exact::Integer(exact) {
            self.report(
                span,
                format!(
                    "HCL cannot compute it exactly: it gives {computed}, not {exact} — compute the value and write it as a literal"
                ),
            );
        }
    }

    fn check_literal(&mut self, number: &Formatted<Number>) {
        let Some(span) = number.span() else {
            return;
        };
        let Some(written) = self.text.get(span.clone()) else {
            return;
        };
        let carried = serde_json::to_string(number.value()).unwrap_or_default();
        if decimal_value(written).is_some() && decimal_value(written) == decimal_value(&carried) {
            return;
        }
        let message = if !written.contains(['.', 'e', 'E']) {
            format!(
                "the integer {written} is outside the integers voodu carries exactly ({MIN_EXACT_INTEGER} to {MAX_EXACT_INTEGER}) — write it as a string, \"{written}\", if the plugin takes larger numbers"
            )
        } else if decimal_value(&carried) == decimal_value("0") {
            format!(
                "the number {written} is too small for a 64-bit float and would arrive as 0 — write 0, or the number as a string, \"{written}\""
            )
        } else {
            format!(
                "the number {written} has more digits than a 64-bit float keeps and would arrive as {carried} — write {carried}, or the number as a string, \"{written}\""
            )
        };
        self.report(Some(span), message);
    }

    fn check_object_keys(&mut self, object: &Object) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (key, _) in object.iter() {
            let name = match key {
                ObjectKey::Ident(ident) => Some(ident.as_str().to_owned()),
                ObjectKey::Expression(Expression::String(text)) => Some(text.value().to_string()),
                ObjectKey::Expression(_) => None,
            };
            let Some(name) = name else { continue };
            if seen.insert(name.clone(), 0).is_some() {
                self.report(
                    key.span(),
                    format!("key \"{name}\" is set twice in this object — keep one"),
                );
            }
        }
    }
}

fn to_f64(value: Exact) -> f64 {
    match value {
        // Exact enough: only used to tell whether a float result is finite.
        Exact::Integer(integer) => integer as f64,
        Exact::Float(float) => float,
    }
}

impl Visit for Checker<'_> {
    fn visit_number(&mut self, number: &Formatted<Number>) {
        self.check_literal(number);
    }

    fn visit_binary_op(&mut self, op: &BinaryOp) {
        visit::visit_binary_op(self, op);
        if self.problem.is_none() {
            self.check_binary(op);
        }
    }

    fn visit_unary_op(&mut self, op: &UnaryOp) {
        visit::visit_unary_op(self, op);
        if self.problem.is_none() {
            self.check_unary(op);
        }
    }

    fn visit_object(&mut self, object: &Object) {
        self.check_object_keys(object);
        visit::visit_object(self, object);
    }

    fn visit_for_expr(&mut self, for_expr: &ForExpr) {
        self.for_depth += 1;
        visit::visit_for_expr(self, for_expr);
        self.for_depth -= 1;
    }
}

fn for_names(for_expr: &ForExpr) -> Vec<String> {
    let intro = &for_expr.intro;
    intro
        .key_var
        .iter()
        .chain(std::iter::once(&intro.value_var))
        .map(|ident| ident.as_str().to_owned())
        .collect()
}

/// Finds where an evaluation error most likely lies: the first variable no
/// `for` binds, or the first function call (none are in scope).
struct UnboundFinder {
    bound: Vec<String>,
    found: Option<usize>,
}

impl Visit for UnboundFinder {
    fn visit_expr(&mut self, expression: &Expression) {
        if self.found.is_some() {
            return;
        }
        match expression {
            Expression::Variable(name) if !self.bound.iter().any(|b| b == name.as_str()) => {
                self.found = expression.span().map(|span| span.start);
            }
            Expression::FuncCall(_) => self.found = expression.span().map(|span| span.start),
            _ => visit::visit_expr(self, expression),
        }
    }

    fn visit_for_expr(&mut self, for_expr: &ForExpr) {
        let depth = self.bound.len();
        self.bound.extend(for_names(for_expr));
        visit::visit_for_expr(self, for_expr);
        self.bound.truncate(depth);
    }
}

fn first_unbound_name(expression: &Expression) -> Option<usize> {
    let mut finder = UnboundFinder {
        bound: Vec::new(),
        found: None,
    };
    finder.visit_expr(expression);
    finder.found
}

/// The first number in an evaluated value that is not finite, if any.
fn first_non_finite(value: &hcl::Value) -> Option<f64> {
    match value {
        hcl::Value::Number(number) => number.as_f64().filter(|float| !float.is_finite()),
        hcl::Value::Array(items) => items.iter().find_map(first_non_finite),
        hcl::Value::Object(entries) => entries.values().find_map(first_non_finite),
        _ => None,
    }
}

/// A decimal number's exact value as (negative, significant digits without
/// leading or trailing zeros, exponent of the last digit). Zero is
/// `(false, "", 0)`. `None` when the text is not a decimal number.
fn decimal_value(text: &str) -> Option<(bool, String, i64)> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], unsigned[at + 1..].parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    let mut exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed.len()).ok()?)?;
    if trimmed.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, trimmed.to_owned(), exponent))
}

/// When HCL refuses to parse a number literal (`1e309` overflows a double),
/// the message to give instead of its syntax error, and where the literal
/// starts. `offset` is where the parser stopped.
pub fn overflowing_literal(text: &str, offset: usize) -> Option<(usize, String)> {
    let before = text.get(..offset)?;
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || *c == '.')
        .last()
        .map(|(at, _)| at)?;
    let rest = text.get(offset..)?;
    let exponent_len = {
        let mut chars = rest.char_indices();
        match chars.next() {
            Some((_, 'e' | 'E')) => {}
            _ => return None,
        }
        let mut end = 1;
        for (at, c) in chars {
            if c.is_ascii_digit() || (at == 1 && (c == '+' || c == '-')) {
                end = at + c.len_utf8();
            } else {
                break;
            }
        }
        end
    };
    let literal = text.get(start..offset + exponent_len)?;
    let value: f64 = literal.parse().ok()?;
    value.is_infinite().then(|| {
        (
            start,
            format!(
                "the number {literal} is larger than the largest 64-bit float (about 1.8e308), so no JSON number can hold it — write it as a string, \"{literal}\", if the plugin takes larger numbers"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn evaluate(source: &str) -> Result<Value, (String, String)> {
        let text = format!("x = {source}\n");
        let body = hcl_edit::parser::parse_body(&text).expect("the test expression parses");
        let attribute = body.get_attribute("x").expect("x is set");
        evaluate_exact(&attribute.value, &text).map_err(|problem| {
            (
                text[problem.offset..].trim_end().to_owned(),
                problem.message,
            )
        })
    }

    #[test]
    fn exact_values_pass_through_unchanged() {
        assert_eq!(evaluate("18446744073709551615").unwrap(), json!(u64::MAX));
        assert_eq!(evaluate("-9223372036854775808").unwrap(), json!(i64::MIN));
        assert_eq!(evaluate("8000 + 84").unwrap(), json!(8084));
        assert_eq!(evaluate("0.1").unwrap().to_string(), "0.1");
        assert_eq!(evaluate("1.50").unwrap().to_string(), "1.5");
        assert_eq!(evaluate("2.5e-3").unwrap().to_string(), "0.0025");
        assert_eq!(evaluate("7 / 2").unwrap(), json!(3.5));
        assert_eq!(evaluate("10 - 12").unwrap(), json!(-2));
        assert_eq!(evaluate("1e308").unwrap().to_string(), "1e+308");
    }

    #[test]
    fn division_by_zero_is_refused_at_the_operation() {
        for source in ["1/0", "-1/0", "0/0", "5 % 0", "1.5 / 0.0"] {
            let (at, message) = evaluate(source).unwrap_err();
            assert!(message.contains("by zero"), "{source}: {message}");
            assert_eq!(at, source, "{source} is refused at the operation");
        }
    }

    #[test]
    fn literals_that_would_change_are_refused_with_the_reason() {
        let (at, message) = evaluate("18446744073709551616").unwrap_err();
        assert_eq!(at, "18446744073709551616");
        assert!(message.starts_with("the integer 18446744073709551616 is outside the integers voodu carries exactly (-9223372036854775808 to 18446744073709551615)"), "{message}");
        let (_, message) = evaluate("1e-400").unwrap_err();
        assert!(message.contains("would arrive as 0"), "{message}");
        let (_, message) = evaluate("0.30000000000000001").unwrap_err();
        assert!(message.contains("would arrive as 0.3"), "{message}");
        let (at, _) = evaluate("[1, 2, 1e-400]").unwrap_err();
        assert_eq!(at, "1e-400]");
    }

    #[test]
    fn integer_arithmetic_never_overflows_or_rounds_silently() {
        let (at, message) = evaluate("18446744073709551615 + 1").unwrap_err();
        assert_eq!(at, "18446744073709551615 + 1");
        assert!(message.contains("18446744073709551616"), "{message}");
        assert!(evaluate("-9223372036854775808 - 1").is_err());
        assert!(evaluate("-(18446744073709551615)").is_err());
        let (_, message) = evaluate("18446744073709551615 + -1").unwrap_err();
        assert!(message.contains("cannot compute it exactly"), "{message}");
        let (at, message) = evaluate("[for x in [18446744073709551615] : x + 1]").unwrap_err();
        assert!(at.starts_with("x + 1"), "{at}");
        assert!(
            message.starts_with("arithmetic on a `for` variable"),
            "{message}"
        );
        assert_eq!(evaluate("[for x in [1, 2] : x]").unwrap(), json!([1, 2]));
        assert!(evaluate("1e308 * 10").unwrap_err().1.contains("overflows"));
    }

    #[test]
    fn duplicate_object_keys_are_refused_at_the_second() {
        let (at, message) = evaluate("{ a = 1, \"a\" = 2 }").unwrap_err();
        assert!(at.starts_with("\"a\" = 2"), "{at}");
        assert_eq!(message, "key \"a\" is set twice in this object — keep one");
    }

    #[test]
    fn evaluation_errors_point_at_the_unknown_name() {
        let (at, message) = evaluate("\"prefix-${var}\"").unwrap_err();
        assert!(at.starts_with("var}"), "{at}");
        assert!(message.starts_with("cannot be evaluated"), "{message}");
    }

    #[test]
    fn a_number_too_large_to_parse_is_named() {
        let text = "x = 1e309\n";
        let (start, message) = overflowing_literal(text, text.find('e').unwrap()).unwrap();
        assert_eq!(start, 4);
        assert!(message.starts_with("the number 1e309 is larger than the largest 64-bit float"));
        assert_eq!(overflowing_literal("x = 1 e", 6), None);
    }

    #[test]
    fn decimal_values_compare_exactly() {
        assert_eq!(decimal_value("1.50"), decimal_value("1.5"));
        assert_eq!(
            decimal_value("1e21"),
            decimal_value("1000000000000000000000")
        );
        assert_eq!(decimal_value("0.0"), decimal_value("0"));
        assert_ne!(decimal_value("1e-400"), decimal_value("0.0"));
        assert_eq!(decimal_value("abc"), None);
    }
}
