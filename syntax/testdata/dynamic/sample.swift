import Foundation

// print(commented) is a decoy
func greet(name: String?) {
    print(name ?? "nobody")
    let note = "print(decoy)"
    if let n = name {
        print(n)
    }
    guard let other = name else { return }
    log(print(other))
}

class Box {
    var value: Int = 0
    func reset() { value = 0 }
    func dump() -> String { return String(value) }
}
