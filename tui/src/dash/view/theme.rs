//! Colours (or none), and the characters that carry meaning without them.

use ratatui::style::{Color, Modifier, Style};

use megaflux_probe::event::Phase;

/// Colours, or none.
#[derive(Clone, Copy, Debug)]
pub struct Theme {
    /// Whether to use colours; without them, bold, reverse and the characters (heat shades,
    /// phase and replica marks) carry the meaning.
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set (to anything).
    pub fn from_env() -> Self {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none(),
        }
    }
    pub(super) fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    pub(super) fn accent(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
}

/// A bin with one replica left (its standby failed or took over), and a bin with none.
pub(super) const DEGRADED_CHAR: char = '!';
pub(super) const LOST_CHAR: char = '×';

/// Heat levels, coolest first: characters for every terminal, colours where allowed.
pub(super) const HEAT_CHARS: [char; 5] = ['·', '░', '▒', '▓', '█'];
pub(super) const HEAT_COLORS: [Color; 5] = [
    Color::DarkGray,
    Color::Blue,
    Color::Green,
    Color::Yellow,
    Color::Red,
];

/// The heat level (an index into [`HEAT_CHARS`]) of `value` keys where the hottest bin has
/// `max`: 0 for none, then quarters of `max` (wide arithmetic: the sizes come from the
/// network and may be near `u64::MAX`; a value over `max` is the hottest).
pub(super) fn heat_level(value: u64, max: u64) -> usize {
    if max == 0 || value == 0 {
        return 0;
    }
    let level = 1 + (u128::from(value) * 4 - 1) / u128::from(max);
    level.min(HEAT_CHARS.len() as u128 - 1) as usize
}

pub(super) fn phase_char(p: Phase) -> char {
    match p {
        Phase::Issued => 'i',
        Phase::Extracted => 'x',
        Phase::Received => 'r',
        Phase::Installed => 'n',
        Phase::Completed => 'c',
    }
}
