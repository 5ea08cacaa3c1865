//! Tables of records, one line per record whatever the records hold.
//!
//! What must stay true: a cell never spans lines and never breaks the columns. User data
//! (a job's kind, queue and last error, an account) is escaped (`\n`, `\t`, `\r`, other
//! control characters as `\u{…}`) and cut to its column's width with an ellipsis; the
//! full text is left to `show` and `--json`.

/// Where a column's cells sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its header, alignment, and the most characters a cell shows.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub head: &'static str,
    pub align: Align,
    pub max: usize,
}

/// A left-aligned column of at most `max` characters.
pub const fn left(head: &'static str, max: usize) -> Column {
    Column {
        head,
        align: Align::Left,
        max,
    }
}

/// A right-aligned column (numbers).
pub const fn right(head: &'static str) -> Column {
    Column {
        head,
        align: Align::Right,
        max: 24,
    }
}

/// Rows under headers; columns as wide as their widest cell.
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[Column]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; each cell is made one line and cut to its column's width.
    pub fn row(&mut self, cells: Vec<String>) {
        let cells = cells
            .iter()
            .zip(&self.columns)
            .map(|(text, column)| cell(text, column.max))
            .collect();
        self.rows.push(cells);
    }

    /// The header line and one line per row.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                let cells = self.rows.iter().map(|r| r[i].chars().count());
                cells.fold(self.columns[i].head.len(), usize::max)
            })
            .collect();
        let heads = self.columns.iter().map(|c| c.head.to_owned()).collect();
        let mut out = String::new();
        for row in std::iter::once(&heads).chain(&self.rows) {
            out += &self.line(row, &widths);
            out.push('\n');
        }
        out
    }

    fn line(&self, row: &[String], widths: &[usize]) -> String {
        let last = row.len() - 1;
        let cells = row.iter().enumerate().map(|(i, text)| {
            let pad = widths[i].saturating_sub(text.chars().count());
            match (self.columns[i].align, i == last) {
                (Align::Right, _) => format!("{}{text}", " ".repeat(pad)),
                (Align::Left, true) => text.clone(),
                (Align::Left, false) => format!("{text}{}", " ".repeat(pad)),
            }
        });
        let line = cells.collect::<Vec<_>>().join("  ");
        line.trim_end().to_owned()
    }

    /// Prints the table on stdout (quietly cut short when the reader closes the pipe).
    pub fn print(&self) {
        if let Err(e) = crate::output::print_stdout(&self.render()) {
            panic!("failed printing to stdout: {e}"); // as `print!` does
        }
    }
}

/// `text` on one line: control characters escaped, cut to `max` characters (the last
/// one an ellipsis) when longer.
pub fn cell(text: &str, max: usize) -> String {
    let escaped: String = text.chars().map(escape).collect();
    if escaped.chars().count() <= max {
        return escaped;
    }
    let mut cut: String = escaped.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn escape(c: char) -> String {
    match c {
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        c if c.is_control() => format!("\\u{{{:x}}}", c as u32),
        c => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_one_line_and_cut_with_an_ellipsis() {
        assert_eq!(cell("a\nb\tc\r\u{1b}[31m", 80), r"a\nb\tc\r\u{1b}[31m");
        assert_eq!(cell("abcdef", 4), "abc…");
        assert_eq!(cell("abcd", 4), "abcd");
        assert_eq!(cell("ééééé", 3), "éé…");
    }

    #[test]
    fn columns_fit_their_widest_cell() {
        let mut t = Table::new(&[right("id"), left("queue", 8), left("error", 10)]);
        t.row(vec!["7".into(), "mail".into(), "x\ny".into()]);
        t.row(vec!["12".into(), "a-long-queue-name".into(), String::new()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            ["id  queue     error", " 7  mail      x\\ny", "12  a-long-…"]
        );
    }
}
