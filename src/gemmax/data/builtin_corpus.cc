#include "gemmax/data/builtin_corpus.h"

#include <cctype>
#include <utility>

#include "gemmax/base/rng.h"

namespace gemmax {
namespace {

// ---- the lexicon ------------------------------------------------------------------------------
// Facts (animal sounds, homes, colours of things) stay fixed across documents, so that a model
// can learn them and a sample can be checked by eye.

struct Person {
  const char *name, *he, *him, *his;
};
const Person kPeople[] = {
    {"Anna", "she", "her", "her"},  {"Ben", "he", "him", "his"},    {"Clara", "she", "her", "her"},
    {"David", "he", "him", "his"},  {"Emma", "she", "her", "her"},  {"Finn", "he", "him", "his"},
    {"Grace", "she", "her", "her"}, {"Hugo", "he", "him", "his"},   {"Ivy", "she", "her", "her"},
    {"Jack", "he", "him", "his"},   {"Lena", "she", "her", "her"},  {"Max", "he", "him", "his"},
    {"Nora", "she", "her", "her"},  {"Oscar", "he", "him", "his"},  {"Rosa", "she", "her", "her"},
    {"Sam", "he", "him", "his"},    {"Tara", "she", "her", "her"},  {"Theo", "he", "him", "his"},
    {"Uma", "she", "her", "her"},   {"Victor", "he", "him", "his"}, {"Zoe", "she", "her", "her"},
    {"Leo", "he", "him", "his"},    {"Mia", "she", "her", "her"},   {"Omar", "he", "him", "his"},
};

struct Animal {
  const char *name, *plural, *sound, *home, *food;
  int legs;
};
const Animal kAnimals[] = {
    {"cat", "cats", "meow", "a warm house", "fish", 4},
    {"dog", "dogs", "woof", "a little wooden house", "bones", 4},
    {"cow", "cows", "moo", "a big red barn", "grass", 4},
    {"duck", "ducks", "quack", "a quiet pond", "bread crumbs", 2},
    {"sheep", "sheep", "baa", "a green field", "grass", 4},
    {"horse", "horses", "neigh", "a stable", "hay", 4},
    {"owl", "owls", "hoot", "a tall tree", "mice", 2},
    {"frog", "frogs", "ribbit", "a pond", "flies", 4},
    {"mouse", "mice", "squeak", "a hole in the wall", "cheese", 4},
    {"bird", "birds", "tweet", "a nest", "seeds", 2},
    {"pig", "pigs", "oink", "a muddy pen", "apples", 4},
    {"goat", "goats", "maa", "the rocky hills", "leaves", 4},
    {"bee", "bees", "buzz", "a hive", "nectar", 6},
    {"lion", "lions", "roar", "the wide grasslands", "meat", 4},
    {"fox", "foxes", "yip", "a den in the woods", "berries", 4},
    {"bear", "bears", "growl", "a dark cave", "honey", 4},
    {"hen", "hens", "cluck", "a henhouse", "corn", 2},
    {"spider", "spiders", "nothing at all", "a web in the corner", "flies", 8},
};

struct Thing {
  const char *name, *plural;
};
const Thing kThings[] = {
    {"ball", "balls"},       {"book", "books"},     {"cup", "cups"},
    {"hat", "hats"},         {"box", "boxes"},      {"key", "keys"},
    {"apple", "apples"},     {"kite", "kites"},     {"lamp", "lamps"},
    {"letter", "letters"},   {"basket", "baskets"}, {"boat", "boats"},
    {"drum", "drums"},       {"map", "maps"},       {"coat", "coats"},
    {"shell", "shells"},     {"flower", "flowers"}, {"stone", "stones"},
    {"pencil", "pencils"},   {"cake", "cakes"},     {"egg", "eggs"},
    {"candle", "candles"},   {"bell", "bells"},     {"feather", "feathers"},
    {"orange", "oranges"},   {"cookie", "cookies"}, {"toy", "toys"},
    {"ribbon", "ribbons"},   {"spoon", "spoons"},   {"umbrella", "umbrellas"},
    {"blanket", "blankets"}, {"clock", "clocks"},
};

// Intransitive verbs carry the preposition that fits them before a place.
struct Verb {
  const char *base, *past, *third, *prep;
};
const Verb kTransitive[] = {
    {"find", "found", "finds", ""},      {"see", "saw", "sees", ""},
    {"carry", "carried", "carries", ""}, {"paint", "painted", "paints", ""},
    {"drop", "dropped", "drops", ""},    {"want", "wanted", "wants", ""},
    {"buy", "bought", "buys", ""},       {"lose", "lost", "loses", ""},
    {"open", "opened", "opens", ""},     {"clean", "cleaned", "cleans", ""},
    {"fix", "fixed", "fixes", ""},       {"hold", "held", "holds", ""},
    {"share", "shared", "shares", ""},   {"hide", "hid", "hides", ""},
    {"throw", "threw", "throws", ""},    {"catch", "caught", "catches", ""},
    {"make", "made", "makes", ""},       {"wash", "washed", "washes", ""},
    {"bring", "brought", "brings", ""},  {"draw", "drew", "draws", ""},
};
const Verb kIntransitive[] = {
    {"walk", "walked", "walks", "to"},       {"run", "ran", "runs", "to"},
    {"sing", "sang", "sings", "in"},         {"laugh", "laughed", "laughs", "in"},
    {"sleep", "slept", "sleeps", "near"},    {"wait", "waited", "waits", "at"},
    {"dance", "danced", "dances", "in"},     {"jump", "jumped", "jumps", "near"},
    {"play", "played", "plays", "in"},       {"swim", "swam", "swims", "near"},
    {"rest", "rested", "rests", "near"},     {"read", "read", "reads", "in"},
    {"climb", "climbed", "climbs", "up to"}, {"whistle", "whistled", "whistles", "at"},
    {"hurry", "hurried", "hurries", "to"},   {"sit", "sat", "sits", "by"},
};

const char* kAdjectives[] = {"small",   "big",   "old",    "young",    "happy",  "quiet",
                             "brave",   "kind",  "clever", "sleepy",   "hungry", "tall",
                             "little",  "busy",  "gentle", "curious",  "shy",    "funny",
                             "careful", "proud", "lazy",   "friendly", "tired",  "lucky"};
const char* kThingAdjectives[] = {"small", "big",   "old",  "new",    "little", "shiny",  "heavy",
                                  "soft",  "round", "tiny", "broken", "clean",  "pretty", "plain"};
const char* kColors[] = {"red",   "blue",   "green",  "yellow", "white", "black",
                         "brown", "orange", "purple", "gray",   "pink"};
const char* kPlaces[] = {"the park",       "the garden",      "the market",  "the forest",
                         "the river",      "the school",      "the kitchen", "the library",
                         "the beach",      "the hill",        "the village", "the farm",
                         "the station",    "the bakery",      "the lake",    "the meadow",
                         "the old bridge", "the town square", "the harbor",  "the museum"};
const char* kTimes[] = {
    "in the morning", "at noon",        "in the afternoon", "in the evening",      "at night",
    "after lunch",    "before dinner",  "at sunrise",       "at sunset",           "yesterday",
    "last week",      "on a rainy day", "on a sunny day",   "early in the morning"};
const char* kWeekdays[] = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                           "Friday", "Saturday", "Sunday"};
const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                         "July",    "August",   "September", "October", "November", "December"};
const char* kFoods[] = {"bread",    "soup",   "rice",       "apples",     "eggs",    "porridge",
                        "pancakes", "cheese", "a sandwich", "some fruit", "noodles", "beans"};
const char* kFeelings[] = {"happy", "sad",   "surprised", "excited",
                           "tired", "proud", "scared",    "calm"};
const char* kWeather[] = {"sunny", "rainy", "windy", "cold", "warm", "cloudy", "snowy", "foggy"};
const char* kJobs[] = {"the teacher", "the baker",     "a farmer",    "the doctor",  "my friend",
                       "the old man", "a little girl", "a small boy", "the captain", "my sister"};
const std::pair<const char*, const char*> kColorFacts[] = {
    {"the sky", "blue"},     {"grass", "green"},   {"snow", "white"},       {"a banana", "yellow"},
    {"a strawberry", "red"}, {"coal", "black"},    {"an orange", "orange"}, {"chocolate", "brown"},
    {"a lemon", "yellow"},   {"a cloud", "white"}, {"a leaf", "green"},     {"a plum", "purple"}};
const std::pair<const char*, const char*> kOpposites[] = {
    {"hot", "cold"},   {"big", "small"},   {"up", "down"},    {"fast", "slow"}, {"day", "night"},
    {"happy", "sad"},  {"open", "closed"}, {"old", "new"},    {"wet", "dry"},   {"loud", "quiet"},
    {"early", "late"}, {"full", "empty"},  {"light", "dark"}, {"left", "right"}};

const char* kOnes[] = {"zero",    "one",     "two",       "three",    "four",
                       "five",    "six",     "seven",     "eight",    "nine",
                       "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                       "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* kTens[] = {"",      "",      "twenty",  "thirty", "forty",
                       "fifty", "sixty", "seventy", "eighty", "ninety"};

std::string words(int n) {  // 0 <= n < 10000
  if (n < 20) return kOnes[n];
  if (n < 100) return std::string(kTens[n / 10]) + (n % 10 ? std::string("-") + kOnes[n % 10] : "");
  if (n < 1000) return words(n / 100) + " hundred" + (n % 100 ? " " + words(n % 100) : "");
  return words(n / 1000) + " thousand" + (n % 1000 ? " " + words(n % 1000) : "");
}

std::string cap(std::string s) {
  if (!s.empty()) s[0] = char(std::toupper(uint8_t(s[0])));
  return s;
}

std::string article(const std::string& word) {
  const char c = word.empty() ? 'x' : word[0];
  return (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u') ? "an " + word : "a " + word;
}

// ---- the grammar ------------------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(uint64_t seed) : rng_(seed) {}

  std::string document() {
    const uint64_t r = below(100);
    if (r < 24) return story();
    if (r < 32) return diary();
    if (r < 44) return paragraph();
    if (r < 56) return arithmetic();
    if (r < 62) return word_problems();
    if (r < 69) return counting();
    if (r < 77) return lists();
    if (r < 86) return facts();
    if (r < 94) return dialogue();
    return questions();
  }

 private:
  uint64_t below(uint64_t n) { return rng_.uniform_int(n); }
  int between(int lo, int hi) { return lo + int(below(uint64_t(hi - lo + 1))); }
  bool chance(double p) { return rng_.uniform() < p; }
  template <class T, size_t N>
  const T& pick(const T (&a)[N]) {
    return a[below(N)];
  }

  std::string number(int n, bool as_words) { return as_words ? words(n) : std::to_string(n); }
  std::string count_of(int n, const Thing& t, bool as_words) {
    return number(n, as_words) + " " + (n == 1 ? t.name : t.plural);
  }
  // "a red ball", "the old book", "a cup"
  std::string object() {
    const Thing& t = pick(kThings);
    std::string noun = t.name;
    const uint64_t r = below(3);
    if (r == 0) noun = std::string(pick(kColors)) + " " + noun;
    if (r == 1) noun = std::string(pick(kThingAdjectives)) + " " + noun;
    return chance(0.6) ? article(noun) : "the " + noun;
  }
  std::string subject() {
    switch (below(4)) {
      case 0:
        return pick(kPeople).name;
      case 1:
        return "the " + std::string(pick(kAdjectives)) + " " + pick(kAnimals).name;
      case 2:
        return pick(kJobs);
      default:
        return article(std::string(pick(kAdjectives)) + " " + pick(kAnimals).name);
    }
  }
  std::string list(const std::vector<std::string>& items) {
    std::string s;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) s += (i + 1 == items.size()) ? " and " : ", ";
      s += items[i];
    }
    return s;
  }

  std::string sentence() {
    const Verb& vt = pick(kTransitive);
    const Verb& vi = pick(kIntransitive);
    switch (below(7)) {
      case 0:
        return cap(subject() + " " + vt.past + " " + object() + " near " + pick(kPlaces) + ".");
      case 1:
        return cap(std::string(pick(kTimes)) + ", " + subject() + " " + vi.past + " " + vi.prep +
                   " " + pick(kPlaces) + ".");
      case 2:
        return cap(subject() + " " + vi.past + " " + pick(kTimes) + ".");
      case 3:
        return cap(subject() + " was " + pick(kFeelings) + " because the day was " +
                   pick(kWeather) + ".");
      case 4:
        return cap(subject() + " " + vt.past + " " + object() + " and " + pick(kTransitive).past +
                   " it " + pick(kTimes) + ".");
      case 5:
        return cap("the " + std::string(pick(kColors)) + " " + pick(kThings).name + " was in " +
                   pick(kPlaces) + ".");
      default: {
        const Person& p = pick(kPeople);
        return cap(std::string(p.name) + " " + vi.third + " " + vi.prep + " " + pick(kPlaces) +
                   " every " + pick(kWeekdays) + ".");
      }
    }
  }

  std::string paragraph() {
    std::string s;
    const int n = between(1, 10);
    for (int i = 0; i < n; ++i) s += (i ? " " : "") + sentence();
    return s;
  }

  std::string story() {
    const Person& p = pick(kPeople);
    Person q = pick(kPeople);
    while (q.name == p.name) q = pick(kPeople);
    const Animal& a = pick(kAnimals);
    const Animal& b = pick(kAnimals);
    const std::string he = p.he, He = cap(p.he), name = p.name, friend_name = q.name;
    std::vector<std::string> s;
    s.push_back("Once upon a time, there was " +
                article(std::string(pick(kAdjectives)) + " " + a.name) + " named " + name + ".");
    s.push_back(name + " lived in " + a.home + " and liked to eat " + a.food + ".");
    const Verb& habit = pick(kIntransitive);
    s.push_back("Every day, " + he + " " + habit.past + " " + habit.prep + " " + pick(kPlaces) +
                ".");
    s.push_back(cap(p.his) + " best friend was " +
                article(std::string(pick(kAdjectives)) + " " + b.name) + " called " + friend_name +
                ".");
    const int events = between(1, 14);
    for (int i = 0; i < events; ++i) {
      const Verb& vi = pick(kIntransitive);
      switch (below(9)) {
        case 0:
          s.push_back("One day, " + he + " found " +
                      article(std::string(pick(kColors)) + " " + pick(kThings).name) + " near " +
                      pick(kPlaces) + ".");
          break;
        case 1:
          s.push_back("\"Look at this " + std::string(pick(kThings).name) + "!\" said " + name +
                      ".");
          break;
        case 2:
          s.push_back(name + " and " + friend_name + " " + vi.past + " " + vi.prep + " " +
                      pick(kPlaces) + " " + pick(kTimes) + ".");
          break;
        case 3:
          s.push_back(He + " felt " + pick(kFeelings) + ".");
          break;
        case 4:
          s.push_back("The weather was " + std::string(pick(kWeather)) + ", so they " + vi.past +
                      " " + vi.prep + " " + pick(kPlaces) + ".");
          break;
        case 5:
          s.push_back("Then " + he + " " + pick(kTransitive).past + " " + object() + ".");
          break;
        case 6:
          s.push_back(friend_name + " said, \"Let us go to " + pick(kPlaces) + ".\"");
          break;
        case 7: {
          const Animal& c = pick(kAnimals);
          const int n = between(2, 9);
          s.push_back("They saw " + words(n) + " " + c.plural + " near " + pick(kPlaces) + ".");
          s.push_back("Each " + std::string(c.name) + " said " + c.sound + ".");
          break;
        }
        default:
          s.push_back(He + " gave " + friend_name + " " + object() + ", and " + friend_name +
                      " said thank you.");
          break;
      }
    }
    switch (below(3)) {
      case 0:
        s.push_back("In the end, " + name + " was very " + pick(kFeelings) + ".");
        break;
      case 1:
        s.push_back("At night, " + name + " went home and slept.");
        break;
      default:
        s.push_back("From that day on, " + name + " and " + friend_name + " were best friends.");
        break;
    }
    if (chance(0.5)) s.push_back("The end.");
    // Paragraph breaks every few sentences.
    std::string out;
    int in_par = 0, par_len = between(2, 5);
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) out += (in_par == 0) ? "\n\n" : " ";
      out += s[i];
      if (++in_par == par_len) in_par = 0, par_len = between(2, 5);
    }
    return out;
  }

  std::string diary() {
    std::string s = "Dear diary,\nToday was " + std::string(pick(kWeekdays)) + " and it was " +
                    pick(kWeather) + ".";
    s += " I woke up " + std::string(pick(kTimes)) + " and ate " + pick(kFoods) + " for breakfast.";
    const int n = between(1, 8);
    for (int i = 0; i < n; ++i) {
      const Verb& vi = pick(kIntransitive);
      switch (below(4)) {
        case 0:
          s += " Then I " + std::string(vi.past) + " " + vi.prep + " " + pick(kPlaces) + ".";
          break;
        case 1:
          s += " I met " + std::string(pick(kPeople).name) + " and we " + vi.past + " together.";
          break;
        case 2:
          s += " I " + std::string(pick(kTransitive).past) + " " + object() + ".";
          break;
        default:
          s += " For lunch I had " + std::string(pick(kFoods)) + ".";
          break;
      }
    }
    s += " Now I am " + std::string(pick(kFeelings)) + " and it is time for bed.\nGood night!";
    return s;
  }

  std::string arithmetic() {
    const int n = between(1, 12);
    const uint64_t style = below(3);
    std::string s;
    for (int i = 0; i < n; ++i) {
      const uint64_t op = below(3);
      const int lim = style == 1 ? 99 : 20;
      int a = between(0, lim), b = between(0, lim);
      if (op == 1 && b > a) std::swap(a, b);
      if (op == 2) a = between(0, 12), b = between(0, 12);
      const int c = op == 0 ? a + b : op == 1 ? a - b : a * b;
      static const char* const kWord[] = {"plus", "minus", "times"};
      static const char* const kSym[] = {"+", "-", "*"};
      if (i) s += "\n";
      if (style == 0)
        s += cap(words(a) + " " + kWord[op] + " " + words(b) + " is " + words(c) + ".");
      else if (style == 1)
        s += std::to_string(a) + " " + kSym[op] + " " + std::to_string(b) + " = " +
             std::to_string(c);
      else
        s += "What is " + std::to_string(a) + " " + kWord[op] + " " + std::to_string(b) + "? " +
             std::to_string(a) + " " + kWord[op] + " " + std::to_string(b) + " is " +
             std::to_string(c) + ".";
    }
    return s;
  }

  std::string word_problems() {
    std::string s;
    const int n = between(1, 4);
    for (int i = 0; i < n; ++i) {
      const Person& p = pick(kPeople);
      const Person& q = pick(kPeople);
      const Thing& t = pick(kThings);
      const bool w = chance(0.5);
      const int a = between(1, 15), b = between(1, 10);
      if (i) s += "\n";
      if (chance(0.5)) {
        s += std::string(p.name) + " has " + count_of(a, t, w) + ". " + cap(p.he) + " finds " +
             number(b, w) + " more. Now " + p.he + " has " + count_of(a + b, t, w) + ".";
      } else {
        const int c = a + b;  // so that the answer is never negative
        s += std::string(p.name) + " had " + count_of(c, t, w) + " and gave " + number(b, w) +
             " to " + (q.name == p.name ? std::string("a friend") : q.name) + ". " + cap(p.he) +
             " has " + count_of(a, t, w) + " left.";
      }
    }
    return s;
  }

  std::string counting() {
    std::vector<std::string> items;
    switch (below(6)) {
      case 0: {
        const int lo = between(1, 10), hi = lo + between(3, 20);
        for (int i = lo; i <= hi; ++i) items.push_back(words(i));
        return cap(list(items)) + ".";
      }
      case 1: {
        const int lo = between(0, 50), hi = lo + between(5, 40);
        std::string s;
        for (int i = lo; i <= hi; ++i) s += (i > lo ? ", " : "") + std::to_string(i);
        return "Count with me: " + s + ".";
      }
      case 2: {
        const int step = between(2, 5), len = between(4, 12);
        std::string s = "Counting by " + std::string(kOnes[step]) + "s: ";
        for (int i = 1; i <= len; ++i) s += (i > 1 ? ", " : "") + std::to_string(i * step);
        return s + ".";
      }
      case 3: {
        const int hi = between(3, 10);
        std::string s = "Counting down: ";
        for (int i = hi; i >= 1; --i) s += (i < hi ? ", " : "") + words(i);
        return s + ". Go!";
      }
      case 4: {
        for (const char* d : kWeekdays) items.push_back(d);
        std::string s = "The days of the week are " + list(items) + ".";
        const int k = int(below(7));
        return s + " " + kWeekdays[(k + 1) % 7] + " comes after " + kWeekdays[k] + ".";
      }
      default: {
        std::string s;
        const int n = between(1, 6);
        for (int i = 0; i < n; ++i) {
          const int k = int(below(12));
          s += (i ? " " : "") + std::string("After ") + kMonths[k] + " comes " +
               kMonths[(k + 1) % 12] + ".";
        }
        return s;
      }
    }
  }

  std::string lists() {
    std::vector<std::string> items;
    switch (below(4)) {
      case 0: {
        std::string s = "Shopping list:";
        const int n = between(2, 8);
        for (int i = 0; i < n; ++i) {
          const Thing& t = pick(kThings);
          s += "\n- " +
               (chance(0.5) ? count_of(between(1, 6), t, false) : std::string(pick(kFoods)));
        }
        return s;
      }
      case 1: {
        std::string s = "Things to do on " + std::string(pick(kWeekdays)) + ":";
        const int n = between(2, 7);
        for (int i = 1; i <= n; ++i)
          s += "\n" + std::to_string(i) + ". " + pick(kTransitive).base + " " + object();
        return s;
      }
      case 2: {
        const int n = between(2, 6);
        for (int i = 0; i < n; ++i) items.push_back(article(pick(kThings).name));
        return "In " + std::string(pick(kPlaces)) + " there is " + list(items) + ".";
      }
      default: {
        const int n = between(2, 4);
        for (int i = 0; i < n; ++i) items.push_back(pick(kColors));
        return std::string(pick(kPeople).name) + " likes the colors " + list(items) + ".";
      }
    }
  }

  std::string fact() {
    const Animal& a = pick(kAnimals);
    switch (below(8)) {
      case 0:
        return cap(article(a.name)) + " says " + a.sound + ".";
      case 1:
        return cap(article(a.name)) + " lives in " + a.home + ".";
      case 2:
        return cap(a.plural) + " like to eat " + a.food + ".";
      case 3:
        return cap(article(a.name)) + " has " + words(a.legs) + " legs.";
      case 4: {
        const auto& [thing, color] = pick(kColorFacts);
        return cap(thing) + " is " + color + ".";
      }
      case 5: {
        const auto& [x, y] = pick(kOpposites);
        return "The opposite of " + std::string(x) + " is " + y + ".";
      }
      case 6:
        return chance(0.5) ? "There are seven days in a week."
                           : "There are twelve months in a year.";
      default: {
        const int k = int(below(12));
        return cap(kMonths[k]) + " is month number " + words(k + 1) + " of the year.";
      }
    }
  }

  std::string facts() {
    std::string s;
    const int n = between(1, 8);
    for (int i = 0; i < n; ++i) s += (i ? (chance(0.5) ? "\n" : " ") : "") + fact();
    return s;
  }

  std::string dialogue() {
    const Person& p = pick(kPeople);
    Person q = pick(kPeople);
    while (q.name == p.name) q = pick(kPeople);
    const std::string place = pick(kPlaces);
    std::string s =
        "\"Hello, " + std::string(q.name) + "!\" said " + p.name + ". \"Where are you going?\"\n";
    s +=
        "\"I am going to " + place + ",\" said " + q.name + ". \"I want to buy " + object() + ".\"";
    const int n = between(0, 4);
    for (int i = 0; i < n; ++i) {
      switch (below(4)) {
        case 0:
          s += "\n\"Can I come with you?\" asked " + std::string(p.name) + ".\n\"Yes, of course!\"";
          break;
        case 1:
          s += "\n\"Is it far?\" asked " + std::string(p.name) + ".\n\"No, it is near " +
               pick(kPlaces) + ".\"";
          break;
        case 2:
          s += "\n\"The weather is " + std::string(pick(kWeather)) + " today,\" said " + q.name +
               ".";
          break;
        default:
          s += "\n\"Do not forget your " + std::string(pick(kThings).name) + ",\" said " + p.name +
               ".";
          break;
      }
    }
    return s + "\n\"Goodbye!\"";
  }

  std::string questions() {
    std::string s;
    const int n = between(1, 6);
    for (int i = 0; i < n; ++i) {
      if (i) s += "\n";
      const Animal& a = pick(kAnimals);
      switch (below(4)) {
        case 0: {
          const auto& [thing, color] = pick(kColorFacts);
          s += "Q: What color is " + std::string(thing) + "?\nA: " + cap(thing) + " is " + color +
               ".";
          break;
        }
        case 1: {
          const int x = between(0, 20), y = between(0, 20);
          s += "Q: What is " + std::to_string(x) + " plus " + std::to_string(y) +
               "?\nA: " + std::to_string(x) + " plus " + std::to_string(y) + " is " +
               std::to_string(x + y) + ".";
          break;
        }
        case 2:
          s += "Q: What does " + article(a.name) + " say?\nA: " + cap(article(a.name)) + " says " +
               a.sound + ".";
          break;
        default:
          s += "Q: Where does " + article(a.name) + " live?\nA: " + cap(article(a.name)) +
               " lives in " + a.home + ".";
          break;
      }
    }
    return s;
  }

  Rng rng_;
};

}  // namespace

std::vector<std::string> builtin_corpus(uint64_t seed, size_t target_bytes) {
  Writer w(seed);
  std::vector<std::string> docs;
  size_t bytes = 0;
  while (bytes < target_bytes) {
    docs.push_back(w.document());
    bytes += docs.back().size();
  }
  return docs;
}

}  // namespace gemmax
